"""The shipped chat_template.jinja, rendered by transformers' apply_chat_template, agrees with
ChatTemplate.render on the test conversations for every variant and option."""

from __future__ import annotations

import itertools

import pytest

from inference.chat.template import ChatTemplate
from inference.chat.variants import VARIANTS
from inference.tokenizer_training import write_tokenizer_files

from .conftest import TOOLS, sample_conversation
from .test_chat_template_golden import PARALLEL

CONVERSATIONS = {
    "sample": sample_conversation(),
    "parallel": PARALLEL,
    "ends_with_assistant": sample_conversation()[:6],
    "only_user": sample_conversation()[1:2],
}
OPTIONS = list(itertools.product([True, False], [None, True, False], [None, "low", "high", "max"]))


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_transformers_apply_chat_template_agrees(variant, tmp_path):
    from transformers import AutoTokenizer

    write_tokenizer_files(tmp_path, variant=variant)
    hf = AutoTokenizer.from_pretrained(tmp_path)
    mismatches = []
    for (name, msgs), tools, (thinking, clear, effort), gen in itertools.product(
        CONVERSATIONS.items(), [None, TOOLS], OPTIONS, [True, False]
    ):
        tpl = ChatTemplate(variant, enable_thinking=thinking, clear_thinking=clear, reasoning_effort=effort)
        ours = tpl.render(msgs, tools, add_generation_prompt=gen)
        ref = hf.apply_chat_template(
            [m.to_template_dict() for m in msgs], tools=[t.to_openai() for t in tools] if tools else None,
            tokenize=False, add_generation_prompt=gen, **tpl.template_kwargs(),
        )
        if ours != ref:
            mismatches.append(f"{name} tools={bool(tools)} {tpl}: ours {ours[-80:]!r} vs hf {ref[-80:]!r}")
        if tools is None and not gen and thinking and effort is None:
            # Token ids agree too: our tokenizer and transformers' load the same tokenizer.json.
            assert hf.encode(ref, add_special_tokens=False) == hf.backend_tokenizer.encode(ours, add_special_tokens=False).ids
    assert not mismatches, "\n".join(mismatches[:5])


def test_shipped_template_file_is_the_variant_template(tmp_path):
    write_tokenizer_files(tmp_path, variant="glm-5.3-flash")
    assert (tmp_path / "chat_template.jinja").read_text() == ChatTemplate("glm-5.3-flash").jinja_source()


def test_flash_template_places_images_where_transformers_does(tmp_path):
    """Image parts (a user message's and a tool result's) render as GLM-V placeholders at their
    place in the text, in ChatTemplate and in the shipped Jinja alike."""
    from transformers import AutoTokenizer

    from inference.chat.messages import Message, ToolCall

    write_tokenizer_files(tmp_path, variant="glm-5.3-flash")
    hf = AutoTokenizer.from_pretrained(tmp_path)
    url = "data:image/png;base64,iVBORw0KGgo="
    user = Message.model_validate({"role": "user", "content": [
        {"type": "text", "text": "Compare "}, {"type": "image_url", "image_url": {"url": url}},
        {"type": "text", "text": " with"}, {"type": "image_url", "image_url": url}]})
    msgs = [Message.system("Look closely."), user,
            Message.assistant("", "check it", [ToolCall(id="c1", name="view", arguments={"path": "a.png"})]),
            Message.model_validate({"role": "tool", "tool_call_id": "c1", "content": [
                {"type": "image_url", "image_url": {"url": url}}, {"type": "text", "text": "a.png (4x4)"}]})]
    tpl = ChatTemplate("glm-5.3-flash")
    ours = tpl.render(msgs, TOOLS)
    ref = hf.apply_chat_template([m.to_template_dict() for m in msgs], tools=[t.to_openai() for t in TOOLS],
                                 tokenize=False, add_generation_prompt=True, **tpl.template_kwargs())
    assert ours == ref
    image = "<|begin_of_image|><|image|><|end_of_image|>"
    assert f"<|user|>Compare {image} with{image}<|assistant|>" in ours
    assert f"<tool_response>{image}a.png (4x4)</tool_response>" in ours
