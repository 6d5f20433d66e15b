"""Model backends on a tiny random checkpoint: in-process engine and `horizon serve` over HTTP.

The random model writes gibberish, which the agent treats as format errors and answers; what
matters here is the token accounting: every turn's prompt extends the last one, so each call's
usage shows the previous turns served from the prefix cache.
"""

from __future__ import annotations

import json

import pytest

from agent.backends import make_backend
from agent.config import AgentConfig
from agent.events import UsageEvent
from agent.loop import Agent
from agent.tools import ToolContext, ToolSet
from agent.tools.builtins import FinishTool

PAGE = 16
ENGINE = {"dtype": "float32", "kv_budget_tokens": 8192, "page_size": PAGE}


def three_turns(backend, config: AgentConfig) -> list[UsageEvent]:
    events = []
    tools = ToolSet([FinishTool(ToolContext(sandbox=None))])
    result = Agent(config, backend, tools, on_event=events.append).run("Say hello, then call finish.")
    assert result.reason in ("step_limit", "submitted", "error")
    return [e for e in events if isinstance(e, UsageEvent)]


def assert_previous_turns_cached(usages: list[UsageEvent]) -> None:
    assert len(usages) >= 2
    assert usages[0].cached_tokens < usages[0].prompt_tokens
    for prev, cur in zip(usages, usages[1:]):
        assert cur.prompt_tokens > prev.context_tokens - PAGE  # the new prompt contains the old one
        # Everything up to the last full page of the previous prompt + reply is reused.
        assert cur.cached_tokens >= (prev.context_tokens // PAGE) * PAGE - PAGE, (prev, cur)
        assert cur.cached_tokens > prev.prompt_tokens // 2


def test_embedded_backend_keeps_the_conversation_as_a_prefix_extension(tiny_checkpoint):
    config = AgentConfig(max_steps=3, max_format_errors=10,
                         embedded={"max_new_tokens": 8, "seed": 0, "engine": ENGINE})
    backend = make_backend(f"embedded:{tiny_checkpoint}", config)
    try:
        usages = three_turns(backend, config)
        assert_previous_turns_cached(usages)
    finally:
        backend.close()


def test_openai_backend_against_horizon_serve(tiny_checkpoint):
    from inference.engine.engine_config import EngineConfig
    from inference.server.runner import BackgroundServer, build_state

    state = build_state(tiny_checkpoint, EngineConfig(**ENGINE), served_model_name="glm-tiny")
    with BackgroundServer(state) as server:
        config = AgentConfig(max_steps=3, max_format_errors=10,
                             openai={"max_tokens": 8, "temperature": 0.0, "max_retries": 0})
        backend = make_backend(f"openai:{server.base_url}", config)
        try:
            assert backend.model_name() == "glm-tiny"
            assert_previous_turns_cached(three_turns(backend, config))
        finally:
            backend.close()


def test_openai_backend_reports_an_unreachable_server():
    from agent.backends import BackendError

    backend = make_backend("openai:http://127.0.0.1:9", AgentConfig(openai={"max_retries": 0}))
    with pytest.raises(BackendError, match="127.0.0.1:9"):
        backend.model_name()


@pytest.mark.parametrize("spec", ["gpt4", "replay:", "local:/x", "embedded:/no/such/ckpt"])
def test_bad_model_specs_are_rejected(spec):
    from agent.backends import BackendError

    with pytest.raises(BackendError):
        make_backend(spec, AgentConfig())


BASH_SPEC = {"name": "bash", "parameters": {"type": "object", "properties": {"command": {"type": "string"}}}}


def test_openai_stream_chunks_assemble_into_one_message():
    from agent.backends.openai_compat import _Stream
    from inference.chat.messages import ToolSpec

    seen = []
    stream = _Stream(lambda kind, text: seen.append((kind, text)))
    stream.feed({"choices": [{"delta": {"reasoning_content": "think"}}]})
    stream.feed({"choices": [{"delta": {"content": "Listing.", "tool_calls": [
        {"index": 0, "id": "c1", "function": {"name": "bash", "arguments": '{"comm'}}]}}]})
    stream.feed({"choices": [{"delta": {"tool_calls": [{"index": 0, "function": {"arguments": 'and": "ls"}'}},
                                                       {"index": 1, "id": "c2", "function": {"name": "bash",
                                                                                            "arguments": "{oops"}}]},
                              "finish_reason": "tool_calls"}]})
    stream.feed({"choices": [], "usage": {"prompt_tokens": 50, "completion_tokens": 9,
                                          "prompt_tokens_details": {"cached_tokens": 32}}})
    response = stream.result([ToolSpec(**BASH_SPEC)])
    assert seen == [("reasoning", "think"), ("content", "Listing.")]
    assert [(c.id, c.arguments) for c in response.message.tool_calls] == [("c1", {"command": "ls"})]
    assert "'bash' are not a valid JSON object" in response.format_errors[0]
    assert (response.usage.prompt_tokens, response.usage.cached_tokens, response.usage.completion_tokens) == (50, 32, 9)


def test_openai_text_format_tool_calls_are_parsed_as_a_fallback():
    from agent.backends.openai_compat import _Stream
    from inference.chat.messages import ToolSpec

    stream = _Stream(None)
    stream.feed({"choices": [{"delta": {"content": "Look:<tool_call>bash<arg_key>command</arg_key>"
                                                   "<arg_value>ls -la</arg_value></tool_call>"}}]})
    response = stream.result([ToolSpec(**BASH_SPEC)])
    assert response.message.content == "Look:" and response.message.tool_calls[0].arguments == {"command": "ls -la"}


def test_embedded_model_output_becomes_a_real_tool_call_in_the_sandbox(tmp_path, tools, sandbox, workdir):
    """A real forward pass writes a GLM tool call; the agent parses it, runs bash, feeds back the result."""
    from agent.events import ReasoningDelta, ToolOutput
    from scripted_model import write_scripted_checkpoint

    checkpoint = write_scripted_checkpoint(tmp_path / "ckpt")
    sandbox.write_file(f"{workdir}/marker.txt", "hello")
    config = AgentConfig(max_steps=2, embedded={"max_new_tokens": 64, "temperature": 0.0, "engine": ENGINE})
    backend = make_backend(f"embedded:{checkpoint}", config)
    events = []
    try:
        result = Agent(config, backend, tools, on_event=events.append).run("What files are there?")
    finally:
        backend.close()
    assert result.reason == "step_limit"
    assistant = result.messages[2]
    assert assistant.reasoning_content == "Need files" and assistant.content == "Listing:"
    assert [(c.name, c.arguments) for c in assistant.tool_calls] == [("bash", {"command": "ls -la"})]
    outputs = [e for e in events if isinstance(e, ToolOutput)]
    assert len(outputs) == 2 and all("marker.txt" in o.output and o.exit_code == 0 for o in outputs)
    assert "".join(e.text for e in events if isinstance(e, ReasoningDelta) and e.step == 1) == "Need files"
    assert_previous_turns_cached([e for e in events if isinstance(e, UsageEvent)])


def test_embedded_backend_detects_an_edited_template_like_the_server(tmp_path):
    """A checkpoint whose 5.3-Flash template was edited locally is still run as 5.3-Flash, by agent and server alike."""
    from inference.chat.template import ChatTemplate
    from inference.random_checkpoint import write_random_checkpoint
    from inference.chat.template import detect_variant

    ckpt = tmp_path / "ckpt"
    write_random_checkpoint(ckpt, preset="tiny", seed=0)
    edited = ChatTemplate("glm-5.3-flash").jinja_source() + "{#- local edit #}\n"
    (ckpt / "chat_template.jinja").write_text(edited)
    tok_config = json.loads((ckpt / "tokenizer_config.json").read_text())
    tok_config["chat_template"] = edited
    (ckpt / "tokenizer_config.json").write_text(json.dumps(tok_config))
    backend = make_backend(f"embedded:{ckpt}", AgentConfig(embedded={"engine": ENGINE}))
    try:
        assert backend.variant == "glm-5.3-flash" == detect_variant(backend.tokenizer.chat_template)
    finally:
        backend.close()


@pytest.mark.parametrize("variant", ["glm-5.2", "glm-5.3"])  # 5.3 cannot turn thinking off in the template
def test_embedded_effort_none_reaches_the_engine_and_yields_no_thinking(tmp_path, variant):
    """The scripted model thinks "Need files" by default; with effort `none` it answers straight away."""
    from scripted_model import write_scripted_checkpoint

    checkpoint = write_scripted_checkpoint(tmp_path / "ckpt")
    replies, submitted = {}, []
    for effort in ("max", "none"):
        config = AgentConfig(max_steps=1, reasoning_effort=effort,
                             embedded={"max_new_tokens": 64, "engine": ENGINE, "variant": variant})
        backend = make_backend(f"embedded:{checkpoint}", config)
        submit = backend.engine.submit
        backend.engine.submit = lambda req, submit=submit: submitted.append(req.reasoning_effort) or submit(req)
        try:
            result = Agent(config, backend, ToolSet([FinishTool(ToolContext(sandbox=None))])).run("What files are there?")
        finally:
            backend.close()
        replies[effort] = result.messages[2]
    assert submitted == ["max", "none"]
    assert replies["max"].reasoning_content == "Need files"
    quick = replies["none"]
    assert quick.reasoning_content is None and quick.content == "Listing:"  # the reply itself is unchanged


def test_openai_effort_none_reaches_horizon_serve_and_yields_no_thinking(tmp_path):
    """The backend sends the level as given; the server maps it for the template and the engine."""
    from inference.engine.engine_config import EngineConfig
    from inference.server.runner import BackgroundServer, build_state
    from scripted_model import write_scripted_checkpoint

    checkpoint = write_scripted_checkpoint(tmp_path / "ckpt")
    state = build_state(checkpoint, EngineConfig(**ENGINE), served_model_name="scripted")
    replies = {}
    with BackgroundServer(state) as server:
        for effort in ("max", "none"):
            config = AgentConfig(max_steps=1, reasoning_effort=effort,
                                 openai={"max_tokens": 64, "temperature": 0.0, "max_retries": 0})
            backend = make_backend(f"openai:{server.base_url}", config)
            try:
                result = Agent(config, backend, ToolSet([FinishTool(ToolContext(sandbox=None))])).run("What files?")
            finally:
                backend.close()
            replies[effort] = result.messages[2]
    assert replies["max"].reasoning_content == "Need files"
    assert not replies["none"].reasoning_content and replies["none"].content == "Listing:"


def test_embedded_backend_builds_from_a_checkpoint_with_the_default_config(tiny_checkpoint):
    """No engine settings at all: the KV budget defaults to the model's context, as in `horizon serve`."""
    from inference.chat.messages import Message

    backend = make_backend(f"embedded:{tiny_checkpoint}", AgentConfig())
    try:
        engine = backend.engine
        assert engine.num_device_pages * engine.config.page_size >= engine.max_position
        reply = backend.complete([Message.user("hi")], [], max_tokens=2)
        assert reply.usage.completion_tokens >= 1
    finally:
        backend.close()


def test_embedded_engine_overrides_still_apply(tiny_checkpoint):
    backend = make_backend(f"embedded:{tiny_checkpoint}",
                           AgentConfig(embedded={"engine": {"kv_budget_tokens": 256, "page_size": 16}}))
    try:
        assert backend.engine.num_device_pages == 16 and backend.engine.max_sequence == 256
    finally:
        backend.close()


@pytest.mark.parametrize(("engine", "message"), [
    ({"kv_budget_tokens": -1}, "embedded.engine: kv_budget_tokens: got -1"),
    ({"dtype": "int3"}, "embedded.engine: dtype: got 'int3'"),
    ({"colour": "blue"}, "embedded.engine: colour: unknown setting"),
    ({"kv_budget_tokens": 8, "page_size": 16}, "less than one page"),
])
def test_bad_embedded_engine_settings_are_one_line_backend_errors(tiny_checkpoint, engine, message):
    from agent.backends import BackendError

    with pytest.raises(BackendError) as caught:
        make_backend(f"embedded:{tiny_checkpoint}", AgentConfig(embedded={"engine": engine}))
    assert message in str(caught.value) and "\n" not in str(caught.value)
