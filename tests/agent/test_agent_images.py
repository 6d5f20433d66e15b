"""Local image files reach the model: `view` on an image, `@shot.png` in a task, through the embedded
GLM-5.3-Flash backend and through `horizon serve` with the OpenAI-compatible backend alike; a model
without vision gets a note (tool images) or a clear refusal (attachments) instead."""

from __future__ import annotations

import base64
import io

import numpy as np
import pytest
import torch

from agent.config import AgentConfig, ToolLimits
from agent.images import ImageFileError, image_part, mentioned_images
from agent.loop import Agent, NoVision
from agent.tools import ToolSet, builtin_tools
from agent_testkit import call, write_replay
from inference.chat.messages import Message

PIL = pytest.importorskip("PIL.Image")


def _png_bytes(seed: int = 0, size=(70, 50)) -> bytes:
    pixels = np.random.default_rng(seed).integers(0, 256, (size[1], size[0], 3), dtype=np.uint8)
    buf = io.BytesIO()
    PIL.fromarray(pixels).save(buf, format="PNG")
    return buf.getvalue()


@pytest.fixture
def local():
    from sandbox import LocalSandbox, SandboxConfig

    with LocalSandbox.start(SandboxConfig()) as sb:
        sb.write_file("/workspace/shot.png", _png_bytes())
        sb.write_file("/workspace/broken.png", _png_bytes()[:60])
        sb.write_file("/workspace/notes.txt", "plain text\n")
        yield sb, ToolSet(builtin_tools(sb, ToolLimits(), workdir="/workspace"))


def test_view_shows_an_image_file_and_refuses_a_broken_one(local):
    _, tools = local
    result = tools.call("view", {"path": "shot.png"})
    assert result.output == "/workspace/shot.png: PNG image, 70x50, %s bytes" % f"{len(_png_bytes()):,}"
    url = result.images[0].url
    assert url.startswith("data:image/png;base64,") and base64.b64decode(url.split(",", 1)[1]) == _png_bytes()
    broken = tools.call("view", {"path": "broken.png"})
    assert broken.is_error and "broken.png: the image does not decode" in broken.output and not broken.images
    assert tools.call("view", {"path": "notes.txt"}).output.endswith("plain text")


def test_tool_images_go_only_to_a_model_that_sees_them(local, tmp_path):
    sb, tools = local
    for vision in (True, False):
        script = write_replay(tmp_path / f"s{vision}.jsonl", [
            {"tool_calls": [call("view", path="shot.png")]}, {"tool_calls": [call("finish", summary="seen")]}])
        from agent.backends.replay import ReplayBackend

        backend = ReplayBackend(script)
        backend.supports_images = vision  # the scripted model claims vision, or not
        result = Agent(AgentConfig(), backend, tools).run("look at shot.png")
        assert result.reason == "submitted"
        observation = backend.prompts[1][-1]
        assert observation.role == "tool" and observation.content.startswith("/workspace/shot.png: PNG image")
        if vision:
            assert observation.images[0].url == image_part(_png_bytes(), "x")[0].url
        else:
            assert observation.images is None and "this model cannot see images" in observation.content


def test_mentions_attach_images_and_refuse_what_cannot_go(local, tmp_path):
    sb, _ = local
    read = lambda name: sb.read_file(f"/workspace/{name}")  # noqa: E731
    parts = mentioned_images("compare @shot.png, then @notes.txt", read)
    assert [(p.where, p.at) for p in parts] == [("@shot.png", len("compare @shot.png"))]
    with pytest.raises(ImageFileError, match="@broken.png: the image does not decode"):
        mentioned_images("see @broken.png", read)
    with pytest.raises(ImageFileError, match="@missing.png: cannot read it"):
        mentioned_images("see @missing.png", read)
    script = write_replay(tmp_path / "s.jsonl", [{"tool_calls": [call("finish", summary="x")]}])
    from agent.backends.replay import ReplayBackend

    with pytest.raises(NoVision, match="@shot.png: the model cannot see images"):
        Agent(AgentConfig(), ReplayBackend(script), ToolSet([])).run("compare @shot.png", images=parts)


def test_horizon_run_refuses_an_image_for_a_text_only_model(tmp_path, capsys):
    from agent.cli.main import main

    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "shot.png").write_bytes(_png_bytes())
    script = write_replay(tmp_path / "s.jsonl", [{"tool_calls": [call("finish", summary="x")]}])
    code = main(["run", "what is in @shot.png", "--repo", str(repo), "--model", f"replay:{script}", "--local",
                 "--trajectory", str(tmp_path / "t.jsonl")])
    assert code == 2 and "@shot.png: the model cannot see images" in capsys.readouterr().err


@pytest.fixture(scope="module")
def flash(tmp_path_factory):
    from inference.glm5_next.random_checkpoint import write_flash_checkpoint

    before = torch.get_num_threads()
    torch.set_num_threads(1)  # a tiny model: a second intra-op thread only adds contention
    yield write_flash_checkpoint(tmp_path_factory.mktemp("agent-flash"), "flash-tiny", seed=13, dtype=torch.float32)
    torch.set_num_threads(before)


def test_embedded_and_openai_backends_send_the_same_image(flash, local):
    """The same attachment through the embedded Flash engine and through `horizon serve` on the same
    checkpoint: the prompts expand the image alike and greedy replies are equal token for token."""
    from agent.backends.embedded import EmbeddedBackend
    from agent.backends.openai_compat import OpenAIBackend
    from agent.config import EmbeddedConfig, OpenAIConfig
    from inference.engine.engine_config import EngineConfig
    from inference.server.runner import BackgroundServer, build_state

    sb, _ = local
    images = mentioned_images("what is in @shot.png?", lambda name: sb.read_file(f"/workspace/{name}"))
    messages = [Message.system("You see images."), Message.user("what is in @shot.png?", images)]
    engine = {"dtype": "float32", "kv_budget_tokens": 2048, "page_size": 16}
    embedded = EmbeddedBackend(flash, EmbeddedConfig(engine=engine))
    try:
        assert embedded.supports_images and embedded.variant == "glm-5.3-flash"
        mine = embedded.complete(messages, [], max_tokens=8)
        prompt_images = _prompt_images(embedded, messages)
        assert len(prompt_images) == 1 and prompt_images[0].num_tokens == 6  # 70x50 -> 84x56 canvas, 3x2 merged
        assert embedded.engine.runner.images.vision_passes == 1
    finally:
        embedded.close()
    state = build_state(flash, EngineConfig(**engine), served_model_name="flash")
    with BackgroundServer(state) as server:
        remote = OpenAIBackend(server.base_url, OpenAIConfig(temperature=0))
        try:
            assert remote.supports_images  # from /v1/models input_modalities
            theirs = remote.complete(messages, [], max_tokens=8)
        finally:
            remote.close()
    assert theirs.usage.prompt_tokens == mine.usage.prompt_tokens
    assert (mine.message.content or "") + (mine.message.reasoning_content or "")  # something was generated
    assert (theirs.message.content, theirs.message.reasoning_content) == (mine.message.content, mine.message.reasoning_content)


def _prompt_images(backend, messages):
    """The PromptImages the embedded backend's conversation would send for `messages`."""
    from inference.chat.conversation import Conversation
    from inference.chat.template import ChatTemplate

    conv = Conversation(backend.tokenizer, ChatTemplate(backend.variant), [], messages, images=backend.images)
    conv.prompt_ids()
    return conv.prompt_images()


def test_compaction_counts_images_and_elides_old_screenshots():
    """An image weighs like ~1,500 tokens in the context estimate, and eliding drops old tool images
    (their text stays) while the first and recent turns keep theirs."""
    from agent.config import ContextConfig
    from agent.context import ELIDED_PREFIX, IMAGE_CHARS, ContextManager, message_chars
    from inference.chat.messages import ToolCall

    part = image_part(_png_bytes(), "shot.png")[0]
    shot = lambda i: Message.tool(f"shot {i}: PNG image", tool_call_id=f"c{i}", images=[part])  # noqa: E731
    assert message_chars(shot(0)) == message_chars(Message.tool("shot 0: PNG image", tool_call_id="c0")) + IMAGE_CHARS
    messages = [Message.system("s"), Message.user("watch the screen")]
    for i in range(12):
        messages += [Message.assistant("", tool_calls=[ToolCall(id=f"c{i}", name="view", arguments={"path": "s.png"})]),
                     shot(i)]
    manager = ContextManager(ContextConfig(context_window=8192, keep_first_turns=1, keep_recent_turns=2, summarize=False))
    done = manager.maybe_compact(messages, 0, None)
    tools = [m for m in done.messages if m.role == "tool"]
    assert tools[0].images and tools[-1].images and tools[-2].images  # first and recent turns untouched
    middle = tools[1:-2]
    assert middle and all(m.images is None and m.content.endswith(f"{ELIDED_PREFIX} 1 image(s)]") for m in middle)


def test_image_types_by_signature_not_by_name():
    from agent.images import image_type

    assert image_type(_png_bytes()) == "image/png"
    assert image_type(b"BMI calculator\n") is None  # a text file that starts like a BMP header
    buf = io.BytesIO()
    PIL.fromarray(np.zeros((4, 4, 3), dtype=np.uint8)).save(buf, format="BMP")
    assert image_type(buf.getvalue()) == "image/bmp"
    jpeg = io.BytesIO()
    PIL.fromarray(np.zeros((32, 32, 3), dtype=np.uint8)).save(jpeg, format="JPEG")
    with pytest.raises(ImageFileError, match="cut.jpg: the image does not decode"):
        image_part(jpeg.getvalue()[:200], "cut.jpg")
