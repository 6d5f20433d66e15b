"""`replay:FILE` — a JSONL file of assistant messages, one per step, for tests and demos.

Each line is an assistant message in the OpenAI shape (`content`, `reasoning_content`,
`tool_calls` with arguments as an object or a JSON string) plus optional keys:
- `"raw": "<model text>"` — instead of a message: GLM-format output text, run through the real
  streaming parser (`inference.chat.parser`) like the embedded backend does, so malformed text
  produces the parser's own format errors;
- `"format_errors": ["..."]` — replay a malformed reply (what the parser would have reported);
- `"purpose": "summary"` — the line answers a compaction summary request (a call without tools),
  not an agent step; summary requests with no such line next fail, and compaction falls back to
  its deterministic summary.

Usage is accounted like a serving engine would: prompt tokens are estimated from the rendered
conversation (4 characters per token) and `cached_tokens` is the part of the prompt identical to
the previous request's prompt plus reply, message by message — so a replayed run shows how
cache-friendly the conversation is.
"""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

from agent.backends.base import BackendError, BackendInterrupted, BackendResponse, ContextOverflow, OnDelta, Usage
from inference.chat.messages import Message, ToolSpec
from inference.chat.parser import parse_completion

CHARS_PER_TOKEN = 4


def _render(message: Message) -> str:
    return json.dumps(message.model_dump(exclude_none=True), ensure_ascii=False, sort_keys=True)


def _tokens(text: str) -> int:
    return (len(text) + CHARS_PER_TOKEN - 1) // CHARS_PER_TOKEN


class ReplayBackend:
    def __init__(self, path: str | Path, context_window: int | None = None):
        """`context_window` (tokens) makes longer prompts fail like a real model's would."""
        self.path = Path(path)
        self.context_window = context_window
        self.steps: list[dict[str, Any]] = []
        self.summaries: list[dict[str, Any]] = []
        try:
            lines = self.path.read_text(encoding="utf-8").splitlines()
        except FileNotFoundError:
            raise BackendError(f"replay file {self.path} does not exist") from None
        for n, line in enumerate(lines, 1):
            if not line.strip():
                continue
            try:
                entry = json.loads(line)
            except json.JSONDecodeError as exc:
                raise BackendError(f"{self.path}:{n}: not JSON: {exc}") from None
            if not isinstance(entry, dict):
                raise BackendError(f"{self.path}:{n}: expected an object, got {type(entry).__name__}")
            (self.summaries if entry.get("purpose") == "summary" else self.steps).append(entry)
        self.position = 0
        self._summary_position = 0
        self._previous: list[str] = []  # rendered prompt + reply of the last request
        self.prompts: list[list[Message]] = []  # what the agent sent, for inspection

    def skip(self, n: int, summaries: int = 0) -> None:
        """Resume support: the first `n` steps and `summaries` summary answers were already used
        by an earlier run."""
        self.position = min(n, len(self.steps))
        self._summary_position = min(summaries, len(self.summaries))

    def complete(
        self,
        messages: list[Message],
        tools: list[ToolSpec],
        *,
        reasoning_effort: str | None = None,
        on_delta: OnDelta | None = None,
        cancel: threading.Event | None = None,
        max_tokens: int | None = None,
    ) -> BackendResponse:
        if cancel is not None and cancel.is_set():
            raise BackendInterrupted("interrupted before the model call")
        summary_request = not tools
        if self.context_window is not None:
            size = sum(_tokens(_render(m)) for m in messages)
            if size > self.context_window:
                raise ContextOverflow(f"prompt of about {size} tokens exceeds the context of {self.context_window}")
        if summary_request:
            if self._summary_position >= len(self.summaries):
                raise BackendError(f"{self.path}: no summary line left to answer a summary request")
            entry = self.summaries[self._summary_position]
            self._summary_position += 1
        else:
            if self.position >= len(self.steps):
                raise BackendError(f"{self.path}: replay exhausted after {len(self.steps)} steps")
            entry = self.steps[self.position]
            self.position += 1
            self.prompts.append(list(messages))
        errors = list(entry.get("format_errors") or [])
        if "raw" in entry:
            parsed = parse_completion(str(entry["raw"]), tools, start_in_reasoning=bool(entry.get("in_reasoning")))
            message = parsed.to_message()
            errors += [e.message for e in parsed.errors]
        else:
            fields = {k: v for k, v in entry.items() if k not in ("format_errors", "purpose")}
            fields.setdefault("role", "assistant")
            try:
                message = Message.model_validate(fields)
            except ValueError as exc:
                raise BackendError(f"{self.path}: step {self.position} is not a valid assistant message: {exc}") from None
        if message.tool_calls:
            for i, call in enumerate(message.tool_calls):
                if not call.id:
                    call.id = f"call_{self.position}_{i}"
        if on_delta is not None:
            if message.reasoning_content:
                on_delta("reasoning", message.reasoning_content)
            if message.content:
                on_delta("content", message.content)
        usage = self._usage(messages, tools, message, summary_request)
        return BackendResponse(
            message=message,
            usage=usage,
            format_errors=errors,
            finish_reason="tool_calls" if message.tool_calls else "stop",
        )

    def _usage(self, messages: list[Message], tools: list[ToolSpec], reply: Message, summary: bool) -> Usage:
        rendered = [json.dumps([t.model_dump() for t in tools], sort_keys=True)] + [_render(m) for m in messages]
        prompt = sum(_tokens(r) for r in rendered)
        cached = 0
        if not summary:
            for mine, theirs in zip(rendered, self._previous):
                if mine != theirs:
                    break
                cached += _tokens(mine)
            self._previous = rendered + [_render(reply)]
        return Usage(prompt_tokens=prompt, cached_tokens=cached, completion_tokens=_tokens(_render(reply)))

    def close(self) -> None:
        pass
