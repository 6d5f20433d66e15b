"""Parse events -> segments of one kind (reasoning, text, a tool call), for the APIs whose replies
are lists of blocks or items (Anthropic content blocks, Responses output items).

A change of kind closes the open segment. Whitespace between segments (GLM often writes a newline
between `</think>` and a tool call) is held back and dropped if nothing else of its kind follows,
so no reply has a block of only whitespace; the session history keeps the exact ids regardless.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, Optional, Union

from inference.chat.messages import ToolCall
from inference.chat.parser import ContentDelta, FormatError, ReasoningDelta, ToolCallEvent

Kind = Literal["reasoning", "text"]


@dataclass(frozen=True)
class Open:
    kind: Kind


@dataclass(frozen=True)
class Text:
    kind: Kind
    text: str


@dataclass(frozen=True)
class Close:
    kind: Kind


@dataclass(frozen=True)
class Call:
    call: ToolCall


Segment = Union[Open, Text, Close, Call]


class Segmenter:
    def __init__(self):
        self._open: Optional[Kind] = None
        self._blank, self._blank_kind = "", None

    def feed(self, event) -> list[Segment]:
        if isinstance(event, ReasoningDelta):
            return self._text("reasoning", event.text)
        if isinstance(event, ContentDelta):
            return self._text("text", event.text)
        if isinstance(event, FormatError):  # the malformed text goes back as text, as in chat completions
            return self._text("text", event.raw) if event.raw else []
        if isinstance(event, ToolCallEvent):
            return self.close() + [Call(event.call)]
        return []

    def close(self) -> list[Segment]:
        self._blank, self._blank_kind = "", None
        if self._open is None:
            return []
        kind, self._open = self._open, None
        return [Close(kind)]

    def _text(self, kind: Kind, text: str) -> list[Segment]:
        if self._open == kind:
            return [Text(kind, text)]
        out = self.close() if self._open is not None else []
        if self._blank_kind == kind:
            text = self._blank + text
        if not text.strip():
            self._blank, self._blank_kind = text, kind
            return out
        self._blank, self._blank_kind = "", None
        self._open = kind
        return out + [Open(kind), Text(kind, text)]
