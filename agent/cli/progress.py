"""How `horizon run` shows a run: short progress lines on stderr, or JSON events on stdout."""

from __future__ import annotations

import json
import sys
from typing import TextIO

from agent.events import (
    Compacted,
    ErrorEvent,
    Event,
    FinishEvent,
    ToolCallEvent,
    ToolOutput,
    UsageEvent,
)


class JsonEventPrinter:
    """One JSON object per line on stdout: the same events the trajectory holds."""

    def __init__(self, out: TextIO | None = None):
        self.out = out or sys.stdout

    def __call__(self, event: Event) -> None:
        self.out.write(event.model_dump_json() + "\n")
        self.out.flush()


class ProgressPrinter:
    """Human-readable progress: one line per tool call and result, usage, compaction, finish."""

    def __init__(self, out: TextIO | None = None):
        self.out = out or sys.stderr
        self.context_tokens = 0

    def __call__(self, event: Event) -> None:
        line = self._line(event)
        if line:
            self.out.write(line + "\n")
            self.out.flush()

    def _line(self, event: Event) -> str | None:
        if isinstance(event, ToolCallEvent):
            return f"[step {event.step}] {event.name} {_brief_args(event.arguments)}"
        if isinstance(event, ToolOutput):
            status = "error" if event.is_error else f"exit {event.exit_code}" if event.exit_code is not None else "ok"
            first = event.output.strip().splitlines()[0][:100] if event.output.strip() else ""
            return f"    -> {status} ({event.duration:.1f}s) {first}"
        if isinstance(event, UsageEvent):
            self.context_tokens = event.context_tokens
            return None
        if isinstance(event, ErrorEvent) and event.kind != "tool_error":
            return f"[step {event.step}] {event.kind}: {event.message[:300]}"
        if isinstance(event, Compacted):
            return f"[step {event.step}] context compacted ({event.stage}): {event.tokens_before} -> {event.tokens_after} tokens"
        if isinstance(event, FinishEvent):
            return f"[step {event.step}] finished: {event.reason} (context {self.context_tokens} tokens)"
        return None


def _brief_args(arguments: dict) -> str:
    if "command" in arguments:
        text = str(arguments["command"])
    elif "path" in arguments:
        text = str(arguments["path"])
    else:
        text = json.dumps(arguments, ensure_ascii=False)
    text = " ".join(text.split())
    return text[:120] + ("..." if len(text) > 120 else "")
