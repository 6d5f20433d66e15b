"""The Anthropic Messages API through the official `anthropic` SDK against a live server.

The scripted checkpoint (conftest) writes "Need files" as thinking, "Listing:" as text and a bash
tool call; with thinking off (the Messages API default) the prompt ends in `</think>` and the
script continues with the text and the call.
"""

from __future__ import annotations

import json

import anthropic
import httpx
import pytest

from inference.chat.template import ChatTemplate
from inference.server.turn import effort_for_budget

from .conftest import SCRIPTED_REPLY

MODEL = "glm-tiny"
BASH = {"name": "bash", "description": "Run a shell command",
        "input_schema": {"type": "object", "properties": {"command": {"type": "string"}}, "required": ["command"]}}
USER = [{"role": "user", "content": "list the files"}]
# The current SDK has no sampling parameters on messages.create; the server still takes them.
GREEDY = {"temperature": 0}


@pytest.fixture()
def claude(live_server):
    base = live_server.base_url.removesuffix("/v1")
    with anthropic.Anthropic(base_url=base, api_key="unused", max_retries=0, timeout=120) as c:
        yield c


def _blocks(message) -> list[tuple]:
    out = []
    for b in message.content:
        out.append((b.type, b.thinking if b.type == "thinking" else b.text if b.type == "text" else (b.name, b.input)))
    return out


def test_tool_use_without_thinking(claude, live_server):
    msg = claude.messages.create(model=MODEL, max_tokens=64, messages=USER, tools=[BASH], extra_body=GREEDY)
    assert _blocks(msg) == [("text", "Listing:"), ("tool_use", ("bash", {"command": "ls -la"}))]
    assert msg.stop_reason == "tool_use" and msg.stop_sequence is None and msg.role == "assistant"
    counted = claude.messages.count_tokens(model=MODEL, messages=USER, tools=[BASH]).input_tokens
    assert msg.usage.input_tokens + msg.usage.cache_read_input_tokens == counted
    template = ChatTemplate(live_server.state.defaults.variant, enable_thinking=False)
    tools = [{"type": "function", "function": {**{k: v for k, v in BASH.items() if k != "input_schema"},
                                               "parameters": BASH["input_schema"]}}]
    assert counted == len(live_server.state.tokenizer.encode(template.render(USER, tools)))


def test_thinking_stream_matches_non_streaming(claude):
    kwargs = dict(model=MODEL, max_tokens=1100, messages=USER, tools=[BASH], extra_body=GREEDY,
                  thinking={"type": "enabled", "budget_tokens": 1024})
    whole = claude.messages.create(**kwargs)
    assert _blocks(whole) == [("thinking", "Need files"), ("text", "Listing:"),
                              ("tool_use", ("bash", {"command": "ls -la"}))]
    assert whole.content[0].signature
    with claude.messages.stream(**kwargs) as stream:
        kinds = [event.type for event in stream]
        final = stream.get_final_message()
    assert _blocks(final) == _blocks(whole) and final.stop_reason == "tool_use"
    assert final.content[0].signature == whole.content[0].signature
    assert final.usage.output_tokens == whole.usage.output_tokens > 0
    assert kinds[0] == "message_start" and kinds[-2:] == ["message_delta", "message_stop"]
    assert kinds.count("content_block_start") == kinds.count("content_block_stop") == 3


def test_raw_event_sequence(live_server):
    body = {"model": MODEL, "max_tokens": 1100, "messages": USER, "tools": [BASH], "stream": True,
            "temperature": 0, "thinking": {"type": "enabled", "budget_tokens": 1024}}
    events = []
    with httpx.stream("POST", live_server.base_url + "/messages", json=body, timeout=120,
                      headers={"x-api-key": "k", "anthropic-version": "2023-06-01"}) as resp:
        assert resp.status_code == 200 and resp.headers["content-type"].startswith("text/event-stream")
        name = None
        for line in resp.iter_lines():
            if line.startswith("event: "):
                name = line[len("event: "):]
            elif line.startswith("data: "):
                data = json.loads(line[len("data: "):])
                assert data["type"] == name
                delta, block = data.get("delta", {}), data.get("content_block", {})
                events.append((name, delta.get("type") or delta.get("stop_reason") or block.get("type")))
    squashed = [e for i, e in enumerate(events) if i == 0 or e != events[i - 1]]
    assert squashed == [
        ("message_start", None), ("ping", None),
        ("content_block_start", "thinking"), ("content_block_delta", "thinking_delta"),
        ("content_block_delta", "signature_delta"), ("content_block_stop", None),
        ("content_block_start", "text"), ("content_block_delta", "text_delta"), ("content_block_stop", None),
        ("content_block_start", "tool_use"), ("content_block_delta", "input_json_delta"), ("content_block_stop", None),
        ("message_delta", "tool_use"), ("message_stop", None),
    ]


def test_tool_result_round_trip_reuses_the_cache(claude):
    headers = {"X-Session-Id": "anthropic-round-trip"}
    history = list(USER)
    usages = []
    for turn in range(3):
        msg = claude.messages.create(model=MODEL, max_tokens=64, messages=history, tools=[BASH], extra_body=GREEDY,
                                     extra_headers=headers)
        call = next(b for b in msg.content if b.type == "tool_use")
        assert (call.name, call.input) == ("bash", {"command": "ls -la"})
        usages.append(msg.usage)
        history += [{"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in msg.content]},
                    {"role": "user", "content": [{"type": "tool_result", "tool_use_id": call.id,
                                                  "content": [{"type": "text", "text": f"a.py b.py {turn}"}]}]}]
    reads = [u.cache_read_input_tokens for u in usages]
    assert reads[1] > 0 and reads[2] > reads[1], usages
    # The session's prompt is the previous prompt + reply + the tool result, token for token.
    totals = [u.input_tokens + u.cache_read_input_tokens for u in usages]
    assert all(b > a + u.output_tokens for a, b, u in zip(totals, totals[1:], usages))


def test_stop_sequences_max_tokens_and_forced_tools(claude):
    thinking = {"type": "enabled", "budget_tokens": 1024}
    cut = claude.messages.create(model=MODEL, max_tokens=1100, messages=USER, extra_body=GREEDY, thinking=thinking,
                                 stop_sequences=["Listing"])
    assert (cut.stop_reason, cut.stop_sequence) == ("stop_sequence", "Listing")
    assert _blocks(cut) == [("thinking", "Need files")]
    short = claude.messages.create(model=MODEL, max_tokens=2, messages=USER, extra_body=GREEDY)
    assert short.stop_reason == "max_tokens" and short.usage.output_tokens == 2
    forced = claude.messages.create(model=MODEL, max_tokens=64, messages=USER, tools=[BASH], extra_body=GREEDY,
                                    tool_choice={"type": "tool", "name": "bash"})
    assert _blocks(forced) == [("tool_use", ("bash", {"command": "ls -la"}))]
    none = claude.messages.create(model=MODEL, max_tokens=64, messages=USER, tools=[BASH], extra_body=GREEDY,
                                  tool_choice={"type": "none"})
    assert none.stop_reason == "end_turn" and none.content[0].text.startswith("Listing:<tool_call>bash")


def test_system_blocks_and_budget_mapping(claude, live_server):
    as_text = claude.messages.count_tokens(model=MODEL, messages=USER, system="Be brief.\n\nUse tools.")
    as_blocks = claude.messages.count_tokens(model=MODEL, messages=USER, system=[
        {"type": "text", "text": "Be brief.", "cache_control": {"type": "ephemeral"}},
        {"type": "text", "text": "Use tools."}])
    assert as_text.input_tokens == as_blocks.input_tokens
    # budget_tokens picks the least effort level that covers it; the engine enforces the exact budget.
    engine = live_server.state.engine
    assert [effort_for_budget(engine, n) for n in (100, 600, 2048, 5000, 10**6)] == ["low", "medium", "medium",
                                                                                      "high", "max"]
    low = claude.messages.count_tokens(model=MODEL, messages=USER, thinking={"type": "enabled", "budget_tokens": 1024})
    expect = ChatTemplate(live_server.state.defaults.variant, reasoning_effort="high").render(USER)
    assert low.input_tokens == len(live_server.state.tokenizer.encode(expect))


def test_sdk_errors_are_typed(claude):
    with pytest.raises(anthropic.NotFoundError) as info:
        claude.messages.create(model="claude-sonnet-4-5", max_tokens=8, messages=USER)
    assert info.value.body["error"]["type"] == "not_found_error"
    with pytest.raises(anthropic.BadRequestError, match="budget_tokens"):
        claude.messages.create(model=MODEL, max_tokens=2000, messages=USER,
                               thinking={"type": "enabled", "budget_tokens": 3000})
    with pytest.raises(anthropic.BadRequestError, match="thinking may not be enabled"):
        claude.messages.create(model=MODEL, max_tokens=2000, messages=USER, tools=[BASH],
                               thinking={"type": "enabled", "budget_tokens": 1024}, tool_choice={"type": "any"})


def test_claude_code_shapes_system_messages_and_its_session_header(claude):
    """What Claude Code sends: a mid-conversation system message, adaptive thinking with an effort,
    and its session id header, which keeps the conversation's exact ids like X-Session-Id."""
    headers = {"X-Claude-Code-Session-Id": "claude-code-session"}
    messages = [{"role": "user", "content": [{"type": "text", "text": "list the files"}]},
                {"role": "system", "content": "Available agents: none"}]
    kwargs = dict(model=MODEL, max_tokens=1100, tools=[BASH], thinking={"type": "adaptive"},
                  output_config={"effort": "high"}, extra_headers=headers, extra_body=GREEDY)
    first = claude.messages.create(messages=messages, **kwargs)
    assert [b.type for b in first.content] == ["thinking", "text", "tool_use"]
    call = first.content[-1]
    follow = messages + [{"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in first.content]},
                         {"role": "user", "content": [{"type": "tool_result", "tool_use_id": call.id, "content": "a.py"}]}]
    second = claude.messages.create(messages=follow, **kwargs)
    seen = first.usage.input_tokens + first.usage.cache_read_input_tokens + first.usage.output_tokens
    assert second.usage.cache_read_input_tokens >= seen - 16  # all but the partial last page


def test_prefill_is_continued_not_repeated(claude, live_server):
    """A final assistant message is text the reply continues (the API's prefill)."""
    tok = live_server.state.tokenizer
    answer = SCRIPTED_REPLY.split("</think>", 1)[1]  # what the script writes after </think>
    prefill = tok.decode(tok.encode(answer)[:2])  # ends on a token boundary of the script
    messages = USER + [{"role": "assistant", "content": prefill}]
    msg = claude.messages.create(model=MODEL, max_tokens=64, messages=messages, tools=[BASH], extra_body=GREEDY)
    assert _blocks(msg) == [("text", answer.split("<tool_call>")[0][len(prefill):]),
                            ("tool_use", ("bash", {"command": "ls -la"}))]
    counted = claude.messages.count_tokens(model=MODEL, messages=messages, tools=[BASH]).input_tokens
    assert msg.usage.input_tokens + msg.usage.cache_read_input_tokens == counted
    with pytest.raises(anthropic.BadRequestError, match="trailing whitespace"):
        claude.messages.create(model=MODEL, max_tokens=8, messages=USER + [{"role": "assistant", "content": "x "}])


def test_claude_code_conversations_in_one_session_keep_their_own_histories(claude, live_server):
    """Claude Code sends one session id for the agent and its side requests (titles, sub-agents)."""
    headers = {"X-Claude-Code-Session-Id": "one-claude-session"}
    kwargs = dict(model=MODEL, max_tokens=64, tools=[BASH], extra_headers=headers, extra_body=GREEDY)
    start = len(live_server.state.sessions)
    main = claude.messages.create(messages=USER, system="agent", **kwargs)
    side = claude.messages.create(messages=[{"role": "user", "content": "name this chat"}], system="titler", **kwargs)
    assert side.stop_reason == "tool_use"
    assert len(live_server.state.sessions) == start + 2  # one kept history per conversation
    call = main.content[-1]
    follow = USER + [{"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in main.content]},
                     {"role": "user", "content": [{"type": "tool_result", "tool_use_id": call.id, "content": "ok"}]}]
    before = len(live_server.state.sessions)
    again = claude.messages.create(messages=follow, system="agent", **kwargs)
    # The agent's conversation continued from its kept ids (the side request did not replace it).
    assert len(live_server.state.sessions) == before
    assert again.usage.cache_read_input_tokens >= main.usage.input_tokens + main.usage.output_tokens - 16


def test_disable_parallel_tool_use_ends_the_reply_at_the_first_call(claude, live_server):
    kwargs = dict(model=MODEL, max_tokens=64, messages=USER, tools=[BASH], extra_body=GREEDY)
    free = claude.messages.create(**kwargs)
    single = claude.messages.create(tool_choice={"type": "auto", "disable_parallel_tool_use": True}, **kwargs)
    assert _blocks(single) == _blocks(free) and single.stop_reason == "tool_use" and single.stop_sequence is None
    # Generation stopped on the call's </tool_call>, before the model could begin another call.
    assert single.usage.output_tokens == free.usage.output_tokens - 1
