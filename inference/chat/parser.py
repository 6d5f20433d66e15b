"""Streaming parser for GLM-5.x output: reasoning, content and tool calls (glm5-model.md §E.3).

The generation prompt usually ends with `<think>`, so output starts as reasoning until `</think>`;
then content until the first `<tool_call>`; then only tool calls (whitespace between them). The
parser never raises: anything malformed becomes a FormatError event the agent can show the model.
Results do not depend on how the text is split into chunks.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterable, Union

from inference.chat.messages import Message, ToolCall, ToolSpec
from inference.chat.special_tokens import STOP_TOKENS
from inference.chat.tool_args import ToolCallFormatError, parse_tool_call

THINK_OPEN, THINK_CLOSE = "<think>", "</think>"
CALL_OPEN, CALL_CLOSE = "<tool_call>", "</tool_call>"


@dataclass(frozen=True)
class ReasoningDelta:
    text: str


@dataclass(frozen=True)
class ContentDelta:
    text: str


@dataclass(frozen=True)
class ToolCallEvent:
    call: ToolCall


@dataclass(frozen=True)
class FormatError:
    message: str
    raw: str


ParseEvent = Union[ReasoningDelta, ContentDelta, ToolCallEvent, FormatError]


class StreamingParser:
    def __init__(self, tools: Iterable[ToolSpec] | None = None, start_in_reasoning: bool = True,
                 tool_calls: bool = True, strip_values: bool = False):
        self.tools = None if tools is None else {t.name: t for t in tools}
        self.strip_values = strip_values  # see parse_tool_call (constrained tool calls)
        # tool_calls=False (tool_choice "none"): tool-call markup is left in the content as text.
        self._content_tags = (CALL_OPEN, *STOP_TOKENS) if tool_calls else STOP_TOKENS
        self._state = "reasoning" if start_in_reasoning else "content"
        self._buf = ""
        self._content_seen = 0  # characters of content consumed (a leading <think> opens reasoning)
        self._trailing = ""  # text after a tool call or after the end of the turn
        self._finished = False

    def feed(self, text: str) -> list[ParseEvent]:
        if self._finished:
            return [FormatError("text fed after finish()", text)] if text else []
        self._buf += text
        events: list[ParseEvent] = []
        try:
            while self._step(events, final=False):
                pass
        except Exception as exc:  # a parser bug must not take a generation down
            events.append(FormatError(f"internal parser error: {exc!r}", self._buf))
            self._buf = ""
        return events

    def finish(self) -> list[ParseEvent]:
        if self._finished:
            return []
        events: list[ParseEvent] = []
        try:
            while self._step(events, final=True):
                pass
            self._finish_state(events)
        except Exception as exc:
            events.append(FormatError(f"internal parser error: {exc!r}", self._buf))
        self._finished = True
        self._buf = ""
        return events

    # -- one state transition; returns True when progress was made ----------------------------

    def _step(self, events: list[ParseEvent], final: bool) -> bool:
        if self._state == "reasoning":
            return self._scan_text(events, final, (THINK_CLOSE, *STOP_TOKENS), ReasoningDelta)
        if self._state == "content":
            if self._content_seen == 0 and not self._buf.startswith(THINK_OPEN) and THINK_OPEN.startswith(self._buf) and not final:
                return False  # could still become a leading <think>
            if self._content_seen == 0 and self._buf.startswith(THINK_OPEN):
                self._buf = self._buf[len(THINK_OPEN):]
                self._state = "reasoning"
                return True
            return self._scan_text(events, final, self._content_tags, ContentDelta)
        if self._state == "tool":
            return self._scan_tool(events, final)
        if self._state == "after_tool":
            return self._scan_after_tool(events, final)
        self._trailing += self._buf  # "done": everything after the end-of-turn marker
        self._buf = ""
        return False

    def _scan_text(self, events, final, tags, delta_type) -> bool:
        pos, tag = _earliest(self._buf, tags)
        if tag is None:
            cut = len(self._buf) if final else _safe_cut(self._buf, tags)
            self._emit_text(events, self._buf[:cut], delta_type)
            self._buf = self._buf[cut:]
            return False
        self._emit_text(events, self._buf[:pos], delta_type)
        self._buf = self._buf[pos + len(tag):]
        self._state = {THINK_CLOSE: "content", CALL_OPEN: "tool"}.get(tag, "done")
        return True

    def _emit_text(self, events, text, delta_type) -> None:
        if not text:
            return
        if delta_type is ContentDelta:
            self._content_seen += len(text)
        if events and type(events[-1]) is delta_type:
            events[-1] = delta_type(events[-1].text + text)
        else:
            events.append(delta_type(text))

    def _scan_tool(self, events, final) -> bool:
        pos, tag = _earliest(self._buf, (CALL_CLOSE, CALL_OPEN, *STOP_TOKENS))
        if tag is None:
            if final:
                self._emit_call(events, self._buf, closed=False)
                self._buf = ""
            return False
        self._emit_call(events, self._buf[:pos], closed=tag == CALL_CLOSE)
        self._buf = self._buf[pos + len(tag):]
        self._state = {CALL_CLOSE: "after_tool", CALL_OPEN: "tool"}.get(tag, "done")
        return True

    def _emit_call(self, events, body: str, closed: bool) -> None:
        raw = CALL_OPEN + body + (CALL_CLOSE if closed else "")
        try:
            events.append(ToolCallEvent(parse_tool_call(body, self.tools, self.strip_values)))
        except ToolCallFormatError as exc:
            message = str(exc) if closed else f"unclosed <tool_call> (no </tool_call>): {exc}"
            events.append(FormatError(message, raw))
        except ValueError as exc:  # pydantic validation of the assembled call
            events.append(FormatError(f"tool call: {exc}", raw))

    def _scan_after_tool(self, events, final) -> bool:
        pos, tag = _earliest(self._buf, (CALL_OPEN, *STOP_TOKENS))
        if tag is None:
            cut = len(self._buf) if final else _safe_cut(self._buf, (CALL_OPEN, *STOP_TOKENS))
            self._trailing += self._buf[:cut]
            self._buf = self._buf[cut:]
            return False
        self._trailing += self._buf[:pos]
        self._flush_trailing(events, "text after a tool call (only further <tool_call> blocks may follow)")
        self._buf = self._buf[pos + len(tag):]
        self._state = "tool" if tag == CALL_OPEN else "done"
        return True

    def _flush_trailing(self, events, why: str) -> None:
        if self._trailing.strip():
            events.append(FormatError(why, self._trailing))
        self._trailing = ""

    def _finish_state(self, events) -> None:
        if self._state == "reasoning":
            events.append(FormatError("unclosed <think>: the reply ended inside its reasoning (no </think>)", ""))
        elif self._state == "after_tool":
            self._flush_trailing(events, "text after a tool call (only further <tool_call> blocks may follow)")
        elif self._state == "done":
            self._flush_trailing(events, "text after the end-of-turn marker")


def _earliest(buf: str, tags: tuple[str, ...]) -> tuple[int, str | None]:
    best, found = len(buf) + 1, None
    for tag in tags:
        i = buf.find(tag)
        if 0 <= i < best:
            best, found = i, tag
    return best, found


def _safe_cut(buf: str, tags: tuple[str, ...]) -> int:
    """Length of the prefix of buf that cannot be the start of any tag."""
    longest = max(len(t) for t in tags)
    for k in range(min(len(buf), longest - 1), 0, -1):
        suffix = buf[-k:]
        if any(t.startswith(suffix) for t in tags):
            return len(buf) - k
    return len(buf)


@dataclass
class ParsedCompletion:
    reasoning: str = ""
    content: str = ""
    tool_calls: list[ToolCall] = field(default_factory=list)
    errors: list[FormatError] = field(default_factory=list)

    def add(self, events: Iterable[ParseEvent]) -> None:
        for ev in events:
            if isinstance(ev, ReasoningDelta):
                self.reasoning += ev.text
            elif isinstance(ev, ContentDelta):
                self.content += ev.text
            elif isinstance(ev, ToolCallEvent):
                self.tool_calls.append(ev.call)
            else:
                self.errors.append(ev)

    def to_message(self) -> Message:
        return Message.assistant(self.content, reasoning=self.reasoning or None, tool_calls=self.tool_calls)


def parse_completion(
    text: str, tools: Iterable[ToolSpec] | None = None, start_in_reasoning: bool = True
) -> ParsedCompletion:
    parser = StreamingParser(tools, start_in_reasoning=start_in_reasoning)
    result = ParsedCompletion()
    result.add(parser.feed(text))
    result.add(parser.finish())
    return result
