from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from inference.chat.messages import ToolCall
from inference.chat.parser import (
    ContentDelta, FormatError, ParsedCompletion, ReasoningDelta, StreamingParser, ToolCallEvent, parse_completion,
)
from inference.chat.template import render_tool_call

from .conftest import TOOLS

CALL = ('<tool_call>bash<arg_key>command</arg_key><arg_value>echo "1" && ls</arg_value>'
        "<arg_key>timeout</arg_key><arg_value>30</arg_value></tool_call>")


def _calls(parsed: ParsedCompletion):
    return [(c.name, c.arguments) for c in parsed.tool_calls]


def test_reasoning_content_and_tool_call():
    p = parse_completion("Let me see.</think>Looking." + CALL + "<|observation|>", TOOLS)
    assert (p.reasoning, p.content, p.errors) == ("Let me see.", "Looking.", [])
    assert _calls(p) == [("bash", {"command": 'echo "1" && ls', "timeout": 30})]


def test_arguments_follow_the_schema():
    text = ("</think><tool_call>edit<arg_key>path</arg_key><arg_value>123</arg_value><arg_key>changes</arg_key>"
            '<arg_value>[{"a": 1}]</arg_value><arg_key>dry_run</arg_key><arg_value>true</arg_value>'
            "<arg_key>opts</arg_key><arg_value>{}</arg_value><arg_key>extra</arg_key><arg_value>plain words"
            "</arg_value></tool_call>")
    p = parse_completion(text, TOOLS)
    # path is a string in the schema: "123" stays text; unknown keys decode when they can.
    assert _calls(p) == [("edit", {"path": "123", "changes": [{"a": 1}], "dry_run": True, "opts": {}, "extra": "plain words"})]


def test_parallel_calls_with_whitespace_and_glm45_newlines():
    text = "r</think>" + CALL + "\n" + "<tool_call>bash\n<arg_key>command</arg_key>\n<arg_value>pwd</arg_value>\n</tool_call>"
    p = parse_completion(text, TOOLS)
    assert _calls(p) == [("bash", {"command": 'echo "1" && ls', "timeout": 30}), ("bash", {"command": "pwd"})]
    assert p.errors == [] and len({c.id for c in p.tool_calls}) == 2


def test_name_then_json_variant_closed_or_not():
    p = parse_completion('</think><tool_call>bash>{"command": "ls", "timeout": 3}</tool_call>', TOOLS)
    assert _calls(p) == [("bash", {"command": "ls", "timeout": 3})] and not p.errors
    p = parse_completion('</think><tool_call>bash>{"command": "ls"}', TOOLS)
    assert _calls(p) == [("bash", {"command": "ls"})] and not p.errors


def test_thinking_off_and_leading_think_tag():
    assert parse_completion("Just an answer.", TOOLS, start_in_reasoning=False).content == "Just an answer."
    p = parse_completion("<think>hmm</think>Answer", TOOLS, start_in_reasoning=False)
    assert (p.reasoning, p.content) == ("hmm", "Answer")
    # A <think> later in content is just text.
    assert parse_completion("a <think> b", None, start_in_reasoning=False).content == "a <think> b"


def test_format_errors_are_events_not_exceptions():
    cases = {
        "</think><tool_call>rm_rf<arg_key>x</arg_key><arg_value>1</arg_value></tool_call>": "unknown tool 'rm_rf'",
        "</think><tool_call>bash<arg_key>timeout</arg_key><arg_value>soon</arg_value></tool_call>": "must be JSON of type integer",
        "</think><tool_call>bash<arg_key>command</arg_key><arg_value>ls": "unclosed <tool_call>",
        "</think>" + CALL + " and then some words": "text after a tool call",
        "</think><tool_call>bash<arg_key>command</arg_key>ls</tool_call>": "malformed arguments",
        "never closes the reasoning": "unclosed <think>",
        "</think>answer<|user|>more text": "after the end-of-turn marker",
        '</think><tool_call>bash>{"command": </tool_call>': "not valid JSON",
    }
    for text, expected in cases.items():
        p = parse_completion(text, TOOLS)
        assert len(p.errors) == 1 and expected in p.errors[0].message, (text, p.errors)
    p = parse_completion("</think>" + CALL + " trailing", TOOLS)
    assert p.errors[0].raw == " trailing" and len(p.tool_calls) == 1


def test_any_tool_name_accepted_without_tool_list():
    p = parse_completion("</think><tool_call>anything<arg_key>n</arg_key><arg_value>5</arg_value></tool_call>", None)
    assert _calls(p) == [("anything", {"n": 5})]


def test_stop_token_text_ends_the_reply_quietly():
    p = parse_completion("r</think>" + CALL + "<|observation|>", TOOLS)
    assert not p.errors and len(p.tool_calls) == 1


def _collect(chunks: list[str], tools=TOOLS, start_in_reasoning=True) -> ParsedCompletion:
    parser = StreamingParser(tools, start_in_reasoning=start_in_reasoning)
    out = ParsedCompletion()
    for chunk in chunks:
        out.add(parser.feed(chunk))
    out.add(parser.finish())
    return out


def _split(text: str, cuts: list[int]) -> list[str]:
    points = sorted({c % (len(text) + 1) for c in cuts})
    return [text[a:b] for a, b in zip([0, *points], [*points, len(text)])]


_word = st.text(alphabet=st.characters(codec="utf-8", exclude_characters="<>"), max_size=12)
_value = st.one_of(st.integers(), st.booleans(), st.lists(st.integers(), max_size=3), st.dictionaries(_word, st.integers(), max_size=2))


@st.composite
def valid_outputs(draw):
    reasoning = draw(_word)
    content = draw(_word)
    calls = []
    for _ in range(draw(st.integers(0, 3))):
        if draw(st.booleans()):
            calls.append(ToolCall(id="x", name="bash", arguments={"command": draw(_word), "timeout": draw(st.integers())}))
        else:
            calls.append(ToolCall(id="x", name="edit", arguments={"path": draw(_word), "opts": draw(_value)}))
    stop = "<|observation|>" if calls else draw(st.sampled_from(["<|user|>", ""]))
    sep = draw(st.sampled_from(["", "\n"]))
    text = reasoning + "</think>" + content + sep.join(render_tool_call(c) for c in calls) + stop
    return text, reasoning, content, calls


@settings(max_examples=300, deadline=None)
@given(case=valid_outputs(), cuts=st.lists(st.integers(min_value=0, max_value=10_000), max_size=12))
def test_random_splits_give_the_same_result(case, cuts):
    text, reasoning, content, calls = case
    whole = parse_completion(text, TOOLS)
    chunked = _collect(_split(text, cuts))
    assert (whole.reasoning, whole.content, whole.errors) == (reasoning, content, [])
    assert _calls(whole) == [(c.name, c.arguments) for c in calls]
    assert (chunked.reasoning, chunked.content, _calls(chunked), chunked.errors) == (
        whole.reasoning, whole.content, _calls(whole), whole.errors)


_tags = ["<think>", "</think>", "<tool_call>", "</tool_call>", "<arg_key>", "</arg_key>", "<arg_value>",
         "</arg_value>", "<|user|>", "<|observation|>", "bash", "edit", ">", "{", "}", '"', "<", "/", "\n", " "]
garbage = st.lists(st.one_of(st.sampled_from(_tags), st.text(max_size=5)), max_size=40).map("".join)


@settings(max_examples=500, deadline=None)
@given(text=garbage, cuts=st.lists(st.integers(min_value=0, max_value=10_000), max_size=10), reasoning=st.booleans())
def test_random_garbage_never_raises_and_is_split_independent(text, cuts, reasoning):
    whole = parse_completion(text, TOOLS, start_in_reasoning=reasoning)
    chunked = _collect(_split(text, cuts), start_in_reasoning=reasoning)
    assert (chunked.reasoning, chunked.content, _calls(chunked), [e.message for e in chunked.errors]) == (
        whole.reasoning, whole.content, _calls(whole), [e.message for e in whole.errors])
    assert all("internal parser error" not in e.message for e in whole.errors)


def test_events_have_the_expected_types():
    parser = StreamingParser(TOOLS)
    events = parser.feed("ab</think>cd" + CALL) + parser.finish()
    assert [type(e) for e in events] == [ReasoningDelta, ContentDelta, ToolCallEvent]
    assert parser.feed("late") == [FormatError("text fed after finish()", "late")]
