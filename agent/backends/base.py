"""The model backend interface every model source implements.

A backend turns the conversation so far plus the tool specs into the next assistant message.
Streaming backends report reasoning/content text through `on_delta(kind, text)` as it arrives
(kind is "reasoning" or "content"). Malformed model output never raises: it comes back as
`format_errors` (what was wrong, in words the model can act on) next to whatever could be parsed.
A backend whose model can see images says so with `supports_images = True` (an optional
attribute; the agent treats a backend without it as text-only and never sends it images).
"""

from __future__ import annotations

import threading
from typing import Callable, Literal, Protocol, runtime_checkable

from pydantic import BaseModel, Field

from inference.chat.messages import Message, ToolSpec

DeltaKind = Literal["reasoning", "content"]
OnDelta = Callable[[DeltaKind, str], None]


class Usage(BaseModel):
    prompt_tokens: int = 0
    cached_tokens: int = 0
    completion_tokens: int = 0

    @property
    def context_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens


class BackendResponse(BaseModel):
    message: Message
    usage: Usage = Field(default_factory=Usage)
    format_errors: list[str] = Field(default_factory=list)
    finish_reason: str | None = None  # "stop" | "tool_calls" | "length" | ...


class BackendError(RuntimeError):
    """The backend could not produce a message (server down, retries exhausted, bad spec)."""


class BackendInterrupted(BackendError):
    """`cancel` was set while the model was generating."""


class ContextOverflow(BackendError):
    """The prompt does not fit the model's context; the agent compacts and retries once."""


@runtime_checkable
class ModelBackend(Protocol):
    def complete(
        self,
        messages: list[Message],
        tools: list[ToolSpec],
        *,
        reasoning_effort: str | None = None,
        on_delta: OnDelta | None = None,
        cancel: threading.Event | None = None,
        max_tokens: int | None = None,
    ) -> BackendResponse: ...

    def close(self) -> None: ...
