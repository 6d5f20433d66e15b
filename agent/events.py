"""Typed events the agent emits while it runs.

Every consumer (the CLI's progress printer and `--json` stream, the TUI, the trajectory writer,
the eval runner) reads the same objects. Each event is a pydantic model with a literal `type`, the
`step` it belongs to (the number of model calls made so far, starting at 1) and a wall-clock
timestamp, so `event.model_dump_json()` / `parse_event(line)` round-trip losslessly.

Besides the streaming events the issue lists, three bookkeeping events make a trajectory
resumable: `RunStart` (task and settings), `MessageAppended` (each message added to the
conversation) and `Compacted` (the conversation was replaced by a compacted one), plus
`WorkspaceCheckpoint` (a patch of the workspace, written by `horizon run` between steps).
"""

from __future__ import annotations

import time
from typing import Annotated, Any, Literal, Union

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter

FinishReason = Literal["submitted", "step_limit", "token_budget", "time_limit", "interrupted", "error"]


class _EventBase(BaseModel):
    model_config = ConfigDict(extra="forbid")

    step: int = 0
    ts: float = Field(default_factory=time.time)


class RunStart(_EventBase):
    """A run (or a resumed run) begins."""

    type: Literal["run_start"] = "run_start"
    task: str
    model: str
    settings: dict[str, Any] = Field(default_factory=dict)  # AgentConfig dump plus run options
    resumed: bool = False


class ModelRequest(_EventBase):
    """The agent is about to ask the model for its next message."""

    type: Literal["model_request"] = "model_request"
    n_messages: int
    estimated_context_tokens: int = 0


class ReasoningDelta(_EventBase):
    type: Literal["reasoning_delta"] = "reasoning_delta"
    text: str


class ContentDelta(_EventBase):
    type: Literal["content_delta"] = "content_delta"
    text: str


class ToolCallEvent(_EventBase):
    """The model asked for a tool call; emitted before approval and execution."""

    type: Literal["tool_call"] = "tool_call"
    call_id: str
    name: str
    arguments: dict[str, Any] = Field(default_factory=dict)


class ToolOutput(_EventBase):
    type: Literal["tool_output"] = "tool_output"
    call_id: str
    name: str
    output: str
    exit_code: int | None = None
    is_error: bool = False
    truncated: bool = False
    duration: float = 0.0


UsagePurpose = Literal["step", "compaction"]


class UsageEvent(_EventBase):
    """Token accounting of one model call. `context_tokens` is the number compaction thresholds
    compare against: the conversation the model saw plus what it wrote.

    `purpose` tells an agent step from the summary request of a compaction. Both cost tokens and
    count in every total; only steps advance the step count (and the replay position on resume).
    A compaction's `context_tokens` is the size of the compacted conversation, not of the summary
    request, so a consumer tracking "context used" from the latest usage event stays right."""

    type: Literal["usage"] = "usage"
    purpose: UsagePurpose = "step"
    prompt_tokens: int = 0
    cached_tokens: int = 0
    completion_tokens: int = 0
    context_tokens: int = 0


class ErrorEvent(_EventBase):
    """Something went wrong but the run may continue (format error, tool failure, backend retry)
    or is about to stop (a FinishEvent with reason "error" follows)."""

    type: Literal["error"] = "error"
    kind: str  # "format_error" | "tool_error" | "backend_error" | "compaction_error" | ...
    message: str


class MessageAppended(_EventBase):
    """A message was appended to the conversation (JSON dump of inference.chat.messages.Message)."""

    type: Literal["message"] = "message"
    message: dict[str, Any]


class Compacted(_EventBase):
    """The conversation was compacted; `messages` is the complete new conversation."""

    type: Literal["compacted"] = "compacted"
    stage: Literal["elide", "summarize"]
    tokens_before: int
    tokens_after: int
    messages: list[dict[str, Any]]


class WorkspaceCheckpoint(_EventBase):
    """The workspace as a binary git patch against the starting commit (for resume)."""

    type: Literal["workspace_checkpoint"] = "workspace_checkpoint"
    patch: str


class FinishEvent(_EventBase):
    type: Literal["finish"] = "finish"
    reason: FinishReason
    summary: str = ""


Event = Annotated[
    Union[
        RunStart,
        ModelRequest,
        ReasoningDelta,
        ContentDelta,
        ToolCallEvent,
        ToolOutput,
        UsageEvent,
        ErrorEvent,
        MessageAppended,
        Compacted,
        WorkspaceCheckpoint,
        FinishEvent,
    ],
    Field(discriminator="type"),
]

_EVENT_ADAPTER: TypeAdapter[Event] = TypeAdapter(Event)


def parse_event(data: str | bytes | dict[str, Any]) -> Event:
    """Parse one event from a JSON line or a dict (the inverse of `event.model_dump_json()`)."""
    if isinstance(data, dict):
        return _EVENT_ADAPTER.validate_python(data)
    return _EVENT_ADAPTER.validate_json(data)


def event_to_json(event: Event) -> str:
    return event.model_dump_json()
