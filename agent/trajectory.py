"""Trajectories: every event as one JSON line, flushed as it happens, and resume from such a file.

A crash or Ctrl-C leaves a usable file. `load_trajectory` rebuilds the state a run needs to
continue: the task and settings (`RunStart`), the conversation (`MessageAppended`, replaced
wholesale by `Compacted`), the step count, token usage and the last `WorkspaceCheckpoint`.
A trailing partial line (the process died mid-write) is ignored.
"""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agent.events import (
    Compacted,
    Event,
    FinishEvent,
    FinishReason,
    MessageAppended,
    RunStart,
    UsageEvent,
    WorkspaceCheckpoint,
    parse_event,
)
from agent.loop import UsageTotals
from inference.chat.messages import Message


class TrajectoryWriter:
    """Appends events to a JSONL file, one flushed line each. Usable as `on_event`."""

    def __init__(self, path: str | Path, *, append: bool = False):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._file = self.path.open("a" if append else "w", encoding="utf-8")
        self._lock = threading.Lock()

    def __call__(self, event: Event) -> None:
        self.write(event)

    def write(self, event: Event) -> None:
        line = event.model_dump_json()
        with self._lock:
            if self._file.closed:
                return
            self._file.write(line + "\n")
            self._file.flush()

    def close(self) -> None:
        with self._lock:
            self._file.close()

    def __enter__(self) -> TrajectoryWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class TrajectoryError(ValueError):
    pass


@dataclass
class TrajectoryState:
    task: str
    model: str
    settings: dict[str, Any]
    messages: list[Message]
    steps: int
    usage: UsageTotals
    checkpoint_patch: str | None = None
    finish_reason: FinishReason | None = None
    events: list[Event] = field(default_factory=list)


def read_events(path: str | Path) -> list[Event]:
    events = []
    lines = Path(path).read_text(encoding="utf-8").splitlines()
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            events.append(parse_event(line))
        except ValueError as exc:
            if n == len(lines):  # torn last line from a crash mid-write
                break
            raise TrajectoryError(f"{path}:{n}: not a trajectory event: {exc}") from None
    return events


def load_trajectory(path: str | Path) -> TrajectoryState:
    """Rebuild the run state from a trajectory file (for `horizon run --resume`)."""
    if not Path(path).is_file():
        raise TrajectoryError(f"trajectory {path} does not exist")
    events = read_events(path)
    start = next((e for e in events if isinstance(e, RunStart)), None)
    if start is None:
        raise TrajectoryError(f"{path}: no run_start event; not a Horizon trajectory")
    state = TrajectoryState(
        task=start.task, model=start.model, settings=start.settings, messages=[], steps=0,
        usage=UsageTotals(), events=events,
    )
    for event in events:
        if isinstance(event, MessageAppended):
            state.messages.append(Message.model_validate(event.message))
        elif isinstance(event, Compacted):
            state.messages = [Message.model_validate(m) for m in event.messages]
        elif isinstance(event, UsageEvent):
            state.usage.add(event)
        elif isinstance(event, WorkspaceCheckpoint):
            state.checkpoint_patch = event.patch
        elif isinstance(event, FinishEvent):
            state.finish_reason = event.reason
        state.steps = max(state.steps, event.step)
    state.messages = _drop_dangling_calls(state.messages)
    return state


def _drop_dangling_calls(messages: list[Message]) -> list[Message]:
    """A crash between a tool call and its result leaves calls without results: answer them so
    the conversation is valid again, and the model knows the call may not have happened."""
    answered = {m.tool_call_id for m in messages if m.role == "tool"}
    out = list(messages)
    last = out[-1] if out else None
    if last is not None and last.role in ("assistant", "tool"):
        pending = []
        for m in reversed(out):
            if m.role == "assistant":
                pending = [c for c in (m.tool_calls or []) if c.id not in answered]
                break
        for call in pending:
            out.append(Message.tool("not run: the run was interrupted before this call finished",
                                    tool_call_id=call.id, name=call.name))
    return out


def dump_messages(messages: list[Message]) -> str:
    return json.dumps([m.model_dump(exclude_none=True) for m in messages], ensure_ascii=False, indent=1)
