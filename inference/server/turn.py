"""One assistant turn for every chat-shaped API (chat completions, Anthropic Messages, Responses): a
chat request in the internal format -> prompt ids, an engine request, and the parsed reply as events.

The Anthropic and Responses routes convert their bodies into a `ChatCompletionRequest`; all three go
through `prepare_chat`, `sampling_params` and `turn_events`, so templates, sessions, forced tool
calls, sampling and reply parsing behave the same everywhere; only the wire format differs.
"""

from __future__ import annotations

import contextlib
import uuid
from dataclasses import dataclass, replace
from typing import Any, AsyncIterator, Optional, Union

from inference.chat.parser import CALL_CLOSE, ContentDelta, FormatError, ParseEvent, StreamingParser
from inference.server.choices import seeded_for_choice
from inference.server.engine_bridge import submit_or_400
from inference.server.errors import APIError
from inference.server.images import image_inputs
from inference.server.output_text import OutputText
from inference.server.prompting import PreparedChat, prepare_chat, sampling_params
from inference.server.protocol import ChatCompletionRequest
from inference.server.replies import ChatReply, token_logprobs

# Effort levels from least to most thinking; a token budget maps onto the first that allows it.
_LEVELS = ("low", "medium", "high", "max")


@dataclass
class TurnEnd:
    """The last event of a turn: why it ended, the engine's usage, and the whole parsed reply."""

    finish_reason: Optional[str]  # the engine's: stop | length | abort
    stop_reason: Union[str, int, None]  # the stop string (a str) or stop token id that ended it
    usage: Any  # inference.engine.request.Usage
    reply: ChatReply


@dataclass
class Turn:
    prepared: PreparedChat
    request: Any  # inference.engine.request.GenerateRequest
    deltas: AsyncIterator
    hidden: int = 0  # characters of content at the start that the client wrote (a prefill), not shown
    ends_at_call: bool = False  # the first </tool_call> stops the reply (the server's stop, not the client's)
    strip_values: bool = False  # a grammar forced the tool calls: read their values as it does (no outer spaces)


@dataclass
class TokenLogprobs:
    """Logprobs (chat format) of the tokens whose parse events follow; only when the request asked."""

    entries: list[dict]


def effort_for_budget(engine, budget_tokens: int) -> str:
    """The least effort level whose thinking budget covers `budget_tokens` (it picks the template's
    'Reasoning Effort' line; the engine enforces the exact budget on top)."""
    from inference.engine.engine_config import DEFAULT_REASONING_BUDGETS

    budgets = getattr(getattr(engine, "config", None), "reasoning_budgets", None) or DEFAULT_REASONING_BUDGETS
    for level in _LEVELS:
        limit = budgets.get(level)
        if limit is None or limit >= budget_tokens:
            return level
    return "max"


def build_chat(**fields) -> ChatCompletionRequest:
    """The internal chat request; a value it refuses is the client's error (400), not ours."""
    from pydantic import ValidationError

    try:
        return ChatCompletionRequest(**fields)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first.get("loc", ())) or "body"
        raise APIError(400, f"{where}: {str(first.get('msg')).removeprefix('Value error, ')}", param=where) from None


def start_turn(state, chat: ChatCompletionRequest, session_id: Optional[str], sessions=None,
               reasoning_budget: Optional[int] = None, thinking: bool = True, prefill: Optional[str] = None,
               one_tool_call: bool = False) -> Turn:
    """Render the prompt and submit it. `sessions` (default: the server's SessionStore) is anything
    with SessionStore's `take`; `thinking=False` on a template that cannot turn thinking off closes
    the opened <think> at once (budget 0); `prefill` is assistant text the reply continues;
    `one_tool_call` ends the reply with its first tool call (no parallel calls)."""
    if prefill:
        prepared = prefilled_chat(state, chat, prefill)
    else:
        prepared = prepare_chat(chat, state.tokenizer, state.defaults,
                                state.sessions if sessions is None else sessions, session_id, image_inputs(state))
    if not thinking and prepared.start_in_reasoning:
        reasoning_budget = 0
    return submit_turn(state, chat, prepared, session_id, reasoning_budget=reasoning_budget,
                       one_tool_call=one_tool_call)


def submit_turn(state, chat: ChatCompletionRequest, prepared: PreparedChat, session_id: Optional[str], *,
                reasoning_budget: Optional[int] = None, one_tool_call: bool = False,
                logprobs: Optional[int] = None, choice: int = 0) -> Turn:
    """Submit an already rendered prompt: choice `choice` of the request (a seeded n > 1 request
    gives each choice its own seed), with `logprobs` top entries per token when not None."""
    from inference.engine.request import GenerateRequest

    # Forced tool calls (Anthropic tool_choice any/tool, Responses tool_choice required/named) and JSON
    # formats arrive as the chat request's tool_choice / response_format: prepare_chat turns them into
    # the grammar (inference/grammar) that makes the reply parse, for every API at once. A prefilled
    # reply continues text the grammar has not seen, so it goes unconstrained.
    grammar = None if prepared.prefill else prepared.grammar
    params = seeded_for_choice(sampling_params(chat, len(prepared.prompt_ids), state.max_context,
                                               state.tokenizer.stop_token_ids, state.defaults, logprobs, grammar),
                               choice)
    if one_tool_call and prepared.parse_tools and prepared.tools:
        params = params.model_copy(update={"stop": [*params.stop, CALL_CLOSE]})
    gen = GenerateRequest(prompt_ids=prepared.prompt_ids, params=params, session_id=session_id, images=prepared.images,
                          reasoning_effort=prepared.engine_effort, reasoning_budget=reasoning_budget,
                          request_id=f"http-{uuid.uuid4().hex[:16]}")
    return Turn(prepared, gen, submit_or_400(state.engine, gen), hidden=len(prepared.prefill),
                ends_at_call=CALL_CLOSE in params.stop and CALL_CLOSE not in chat.stop_strings(),
                strip_values=grammar is not None and grammar.kind == "tool_call")


def prefilled_chat(state, chat: ChatCompletionRequest, prefill: str) -> PreparedChat:
    """A prompt that ends inside the assistant turn, after `prefill` (thinking off, no session: the
    client's partial turn is not a message the conversation has)."""
    base = prepare_chat(chat, state.tokenizer, state.defaults, state.sessions, None, image_inputs(state))
    style = base.template.style
    # The rendered messages (their images expanded) stay; the generation prompt gives way to the prefill.
    opened = len(state.tokenizer.encode(base.template.generation_prompt()))
    tail = state.tokenizer.encode("<|assistant|>" + (style.thinking_off_prompt or style.empty_think) + prefill)
    return replace(base, prompt_ids=base.prompt_ids[:-opened] + tail, start_in_reasoning=False, prefill=prefill,
                   conversation=None)


async def turn_events(state, turn: Turn, reply: Optional[ChatReply] = None
                      ) -> AsyncIterator[Union[ParseEvent, TokenLogprobs, TurnEnd]]:
    """Parse events as the reply is generated (each recorded into `reply`, a fresh ChatReply by
    default, before it is yielded), then one TurnEnd. A request that asked for logprobs gets a
    TokenLogprobs ahead of each delta's events. The session conversation (if any) has the reply
    recorded by then; storing it is the caller's choice."""
    prepared = turn.prepared
    parser = StreamingParser(prepared.tools if prepared.parse_tools else None,
                             start_in_reasoning=prepared.start_in_reasoning, tool_calls=prepared.parse_tools,
                             strip_values=turn.strip_values)
    text = OutputText(state.tokenizer, turn.request.params.stop)
    reply = reply if reply is not None else ChatReply(state.model_name)
    events = parser.feed(prepared.prefill)
    hidden = turn.hidden
    all_ids: list[int] = []
    reason, stop, usage = None, None, None
    async with contextlib.aclosing(turn.deltas):
        async for delta in turn.deltas:
            all_ids.extend(delta.token_ids)
            final = delta.finish_reason is not None
            events += parser.feed(text.push(delta.token_ids, delta.stop_reason if final else None))
            if final:
                reason, stop, usage = delta.finish_reason, delta.stop_reason, delta.usage
                if turn.ends_at_call and stop == CALL_CLOSE:  # stopped on the call's close: give it back
                    events += parser.feed(text.finish() + CALL_CLOSE)
                    stop = None
                events += parser.feed(text.finish()) + parser.finish()
                if reason == "length":  # the stop reason already says the reasoning was cut off
                    events = [e for e in events
                              if not (isinstance(e, FormatError) and e.message.startswith("unclosed <think>"))]
            if hidden:
                events, hidden = _drop_content(events, hidden)
            if delta.logprobs:
                entries = token_logprobs(state.tokenizer, delta.logprobs)
                reply.logprobs += entries
                yield TokenLogprobs(entries)
            for ev in events:
                reply.add(ev)
                yield ev
            events = []
    if prepared.conversation is not None and reason is not None:
        prepared.conversation.add_generated(all_ids, reply.message())
    yield TurnEnd(reason, stop, usage, reply)


def _drop_content(events: list, hidden: int) -> tuple[list, int]:
    """Leave out the first `hidden` characters of content (the parser may hold some back a while)."""
    out = []
    for ev in events:
        if hidden and isinstance(ev, ContentDelta):
            cut = min(hidden, len(ev.text))
            hidden -= cut
            if ev.text[cut:]:
                out.append(ContentDelta(ev.text[cut:]))
        else:
            out.append(ev)
    return out, hidden
