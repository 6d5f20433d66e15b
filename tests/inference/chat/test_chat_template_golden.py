"""Golden renders of the GLM-5.x template variants (glm5-model.md §E.2, §E.3)."""

from __future__ import annotations

import pytest

from inference.chat.messages import Message, ToolCall
from inference.chat.template import TOOLS_FOOTER, TOOLS_HEADER, ChatTemplate
from inference.chat.variants import normalize_reasoning_effort

from .conftest import BASH, TOOLS, sample_conversation

HI = [Message.user("hi")]


def test_single_turn_glm5_is_five_special_tokens_plus_text(tokenizer):
    text = ChatTemplate("glm-5").render(HI)
    assert text == "[gMASK]<sop><|user|>hi<|assistant|><think>"
    ids = tokenizer.encode(text)
    specials = [i for i in ids if i in tokenizer.special_tokens.values()]
    assert len(specials) == 5 and tokenizer.decode(ids) == text


@pytest.mark.parametrize(
    "variant, expected",
    [
        ("glm-5", "[gMASK]<sop><|user|>hi<|assistant|></think>"),
        ("glm-5.1", "[gMASK]<sop><|user|>hi<|assistant|></think>"),
        ("glm-5.2", "[gMASK]<sop><|system|>Reasoning Effort: Max<|user|>hi<|assistant|></think>"),
        # The official 5.3 generation prompt ignores enable_thinking.
        ("glm-5.3", "[gMASK]<sop><|system|>Reasoning Effort: Max<|user|>hi<|assistant|><think>"),
        ("glm-5.3-flash", "[gMASK]<sop><|system|>Reasoning Effort: Max<|user|>hi<|assistant|><think></think>"),
    ],
)
def test_thinking_off_generation_prompt(variant, expected):
    assert ChatTemplate(variant, enable_thinking=False).render(HI) == expected


@pytest.mark.parametrize("effort, label", [(None, "Max"), ("low", "Low"), ("high", "High"), ("max", "Max")])
def test_reasoning_effort_line(effort, label):
    text = ChatTemplate("glm-5.2", reasoning_effort=effort).render(HI)
    assert text == f"[gMASK]<sop><|system|>Reasoning Effort: {label}<|user|>hi<|assistant|><think>"


def test_effort_words_are_normalized_and_bad_values_rejected():
    assert [normalize_reasoning_effort(w) for w in ("none", "minimal", "medium", "xhigh", "HIGH")] == [
        "low", "low", "high", "max", "high"]
    with pytest.raises(ValueError, match="reasoning_effort"):
        normalize_reasoning_effort("extreme")
    with pytest.raises(ValueError, match="reasoning_effort"):
        ChatTemplate("glm-5.2", reasoning_effort="medium")
    with pytest.raises(ValueError, match="variant"):
        ChatTemplate("glm-4")


def test_tools_block_dumps_openai_objects_for_glm5_and_functions_for_flash():
    glm5 = ChatTemplate("glm-5").render(HI, tools=[BASH])
    line = ('{"type": "function", "function": {"name": "bash", "description": "Run a shell command", "parameters": '
            '{"type": "object", "properties": {"command": {"type": "string"}, "timeout": {"type": "integer"}}, '
            '"required": ["command"]}}}\n')
    assert glm5 == "[gMASK]<sop>" + TOOLS_HEADER + line + TOOLS_FOOTER + "<|user|>hi<|assistant|><think>"
    flash = ChatTemplate("glm-5.3-flash").render(HI, tools=[BASH.to_openai()])
    assert '\n{"name": "bash", "description": "Run a shell command", "parameters": ' in flash
    assert flash.startswith("[gMASK]<sop><|system|>Reasoning Effort: Max<|system|>\n# Tools\n")
    assert TOOLS_FOOTER.endswith("</arg_value>...</tool_call>")


PARALLEL = [
    Message.user("go"),
    Message.assistant("Checking.", reasoning="r", tool_calls=[
        ToolCall(id="a", name="bash", arguments={"command": "ls", "timeout": 5}),
        ToolCall(id="b", name="edit", arguments={"path": "x", "changes": [1, "二"], "dry_run": False}),
    ]),
    Message.tool("second", tool_call_id="b"),
    Message.tool("first", tool_call_id="a"),
]
CALLS = ("<tool_call>bash<arg_key>command</arg_key><arg_value>ls</arg_value><arg_key>timeout</arg_key>"
         "<arg_value>5</arg_value></tool_call><tool_call>edit<arg_key>path</arg_key><arg_value>x</arg_value>"
         '<arg_key>changes</arg_key><arg_value>[1, "二"]</arg_value><arg_key>dry_run</arg_key>'
         "<arg_value>false</arg_value></tool_call>")


def test_parallel_tool_calls_and_one_observation_for_consecutive_results():
    text = ChatTemplate("glm-5").render(PARALLEL, tools=None)
    assert text == ("[gMASK]<sop><|user|>go<|assistant|><think>r</think>Checking." + CALLS
                    + "<|observation|><tool_response>second</tool_response><tool_response>first</tool_response>"
                    + "<|assistant|><think>")


def test_flash_reorders_tool_results_to_call_order_when_ids_allow():
    text = ChatTemplate("glm-5.3-flash").render(PARALLEL)
    assert text.endswith("<|observation|><tool_response>first</tool_response><tool_response>second</tool_response>"
                         "<|assistant|><think>")
    unknown_id = PARALLEL[:3] + [Message.tool("first", tool_call_id="zzz")]
    assert ChatTemplate("glm-5.3-flash").render(unknown_id).endswith(
        "<tool_response>second</tool_response><tool_response>first</tool_response><|assistant|><think>")


def _history_assistants(text: str) -> list[str]:
    return [part.split("<|", 1)[0] for part in text.split("<|assistant|>")[1:-1]]


def test_glm5_drops_reasoning_before_last_user_unless_clear_thinking_is_false():
    msgs = sample_conversation()
    dropped = _history_assistants(ChatTemplate("glm-5", clear_thinking=None).render(msgs))
    kept = _history_assistants(ChatTemplate("glm-5", clear_thinking=False).render(msgs))
    assert [a.split("</think>")[0] for a in dropped] == ["", "", ""]
    assert kept[0].startswith("<think>Need to see the files.</think>I will look first.<tool_call>bash")
    assert kept[1] == "<think>Both done.</think>Fixed it."
    assert kept[2] == "<think>inline reasoning</think>Running them now."
    # clear_thinking=True is the same as the GLM-5 default.
    assert ChatTemplate("glm-5", clear_thinking=True).render(msgs) == ChatTemplate("glm-5", clear_thinking=None).render(msgs)


def test_reasoning_after_the_last_user_message_is_always_kept():
    msgs = sample_conversation()[:6]
    text = ChatTemplate("glm-5", clear_thinking=True).render(msgs)
    assert "<|assistant|><think>Need to see the files.</think>I will look first." in text
    assert "<|assistant|><think>Both done.</think>Fixed it." in text


def test_glm53_keeps_reasoning_by_default_and_flash_keeps_it_unstripped():
    msgs = sample_conversation()
    assert "<think>Both done.</think>" in ChatTemplate("glm-5.3", clear_thinking=None).render(msgs)
    assert "<|assistant|></think>Fixed it." in ChatTemplate("glm-5.3", clear_thinking=True).render(msgs)
    flash = ChatTemplate("glm-5.3-flash", clear_thinking=None).render(msgs)
    assert "<|assistant|><think>\nNeed to see the files.\n</think>I will look first." in flash
    cleared = ChatTemplate("glm-5.3-flash", clear_thinking=True).render(msgs)
    assert "<|assistant|><think></think>Fixed it." in cleared


def test_messages_accept_openai_dicts():
    wire = [
        {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "x", "type": "function", "function": {"name": "bash", "arguments": '{"command": "pwd"}'}}]},
        {"role": "tool", "tool_call_id": "x", "content": "/"},
    ]
    text = ChatTemplate("glm-5").render(wire, tools=[t.to_openai() for t in TOOLS])
    assert text.endswith("<|user|>ab<|assistant|></think><tool_call>bash<arg_key>command</arg_key><arg_value>pwd"
                         "</arg_value></tool_call><|observation|><tool_response>/</tool_response><|assistant|><think>")
