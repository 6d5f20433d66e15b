"""The agent loop: ask the model, run the tools it calls, append the observations, repeat.

    agent = Agent(config, backend, tools, on_event=print)
    result = agent.run("fix the failing test")

The history is one linear list of messages (`agent.messages`); compaction may replace it with a
shorter list (see agent/context.py). Control flow between steps uses the `_Stop` exception, as in
mini-swe-agent. Approvals, compaction and trajectories are layers around this file, not inside it.
"""

from __future__ import annotations

import json
import threading
import time
from typing import Callable

from pydantic import BaseModel

from agent.backends.base import (
    BackendError,
    BackendInterrupted,
    BackendResponse,
    ContextOverflow,
    ModelBackend,
    Usage,
)
from agent.config import AgentConfig
from agent.context import Compaction, ContextManager
from agent.events import (
    ContentDelta,
    ErrorEvent,
    Event,
    FinishEvent,
    FinishReason,
    MessageAppended,
    ModelRequest,
    ReasoningDelta,
    ToolCallEvent,
    ToolOutput,
    UsageEvent,
    UsagePurpose,
)
from agent.instructions import build_system_prompt
from agent.tools.base import ToolResult, run_with_deadline
from agent.tools.toolset import ToolSet
from inference.chat.content_parts import ImagePart
from inference.chat.messages import Message, ToolCall

try:
    from sandbox.errors import SandboxError
except ImportError:  # pragma: no cover
    SandboxError = RuntimeError  # type: ignore[misc,assignment]


REPEAT_LIMIT = 3  # identical call + identical result this many times in a row gets a nudge


class Approval(BaseModel):
    """The answer of an approver: run the tool call, or refuse it with a reason the model reads."""

    approved: bool
    reason: str = ""

    @classmethod
    def approve(cls) -> Approval:
        return cls(approved=True)

    @classmethod
    def deny(cls, reason: str = "the user declined this tool call") -> Approval:
        return cls(approved=False, reason=reason)


class UsageTotals(BaseModel):
    """Tokens of every model call of a run: its steps and its compaction summaries."""

    calls: int = 0  # agent steps' model calls (resume replays from here)
    compaction_calls: int = 0  # summary requests of compactions
    prompt_tokens: int = 0
    cached_tokens: int = 0
    completion_tokens: int = 0

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens

    def add(self, event: UsageEvent) -> None:
        if event.purpose == "compaction":
            self.compaction_calls += 1
        else:
            self.calls += 1
        self.prompt_tokens += event.prompt_tokens
        self.cached_tokens += event.cached_tokens
        self.completion_tokens += event.completion_tokens


class RunResult(BaseModel):
    reason: FinishReason
    summary: str
    steps: int
    usage: UsageTotals
    messages: list[Message]
    duration_s: float


class NoVision(ValueError):
    """Images were attached to a task for a model that cannot see them."""


class _Stop(Exception):
    def __init__(self, reason: FinishReason, summary: str = ""):
        super().__init__(summary)
        self.reason = reason
        self.summary = summary


class Agent:
    def __init__(
        self,
        config: AgentConfig,
        backend: ModelBackend,
        tools: ToolSet,
        on_event: Callable[[Event], None] | None = None,
        approver: Callable[[ToolCallEvent], Approval] | None = None,
        *,
        system_prompt: str | None = None,
        messages: list[Message] | None = None,
        steps_done: int = 0,
        usage: UsageTotals | None = None,
    ):
        self.config = config
        self.backend = backend
        self.tools = tools
        self.on_event = on_event
        self.approver = approver
        self.system_prompt = system_prompt if system_prompt is not None else build_system_prompt(config)
        self.context = ContextManager(config.context)
        # A restored agent (resume) counts its earlier steps and tokens against the limits.
        self.messages: list[Message] = list(messages or [])
        self.step = steps_done
        self.usage = usage.model_copy() if usage else UsageTotals()
        self._counts_from_zero = bool(messages)
        self._interrupt = threading.Event()
        self._format_errors = 0
        self._last_context_tokens = 0
        self._recent_calls: list[tuple[str, str, str]] = []
        self._deadline: float | None = None

    # -- public -------------------------------------------------------------------------------
    @property
    def sees_images(self) -> bool:
        """Image attachments and `view` images reach the model only where the backend says it sees them."""
        return bool(getattr(self.backend, "supports_images", False))

    def run(self, task: str | None = None, images: list[ImagePart] | None = None) -> RunResult:
        """Run until the model finishes or a limit is hit. With a task on a fresh agent, start a
        conversation; on an agent with history, `task` is a follow-up user message (or None to
        continue, e.g. after resume). `images`: image parts of the task (agent/images.py); a backend
        without vision refuses them (ValueError) before anything runs."""
        if images and not self.sees_images:
            raise NoVision(f"{images[0].where or 'images'}: the model cannot see images (its backend has no "
                           "vision); attach images only with a vision model such as GLM-5.3-Flash")
        self._interrupt.clear()
        started = time.monotonic()
        limit = self.config.time_limit_s
        self._deadline = started + limit if limit is not None else None
        step_base, token_base = (0, 0) if self._counts_from_zero else (self.step, self.usage.total_tokens)
        self._counts_from_zero = False
        if not self.messages:
            if task is None:
                raise ValueError("run() needs a task for a fresh conversation")
            self._append(Message.system(self.system_prompt))
        if task is not None:
            self._append(Message.user(task, images or None))
        try:
            while True:
                self._check_limits(started, step_base, token_base)
                self._compact_if_needed()
                self._handle(self._query())
        except _Stop as stop:
            reason, summary = stop.reason, stop.summary
        except (BackendError, SandboxError) as exc:
            self._emit(ErrorEvent(step=self.step, kind=type(exc).__name__, message=str(exc)))
            reason, summary = "error", f"{type(exc).__name__}: {exc}"
        self._emit(FinishEvent(step=self.step, reason=reason, summary=summary))
        return RunResult(
            reason=reason,
            summary=summary,
            steps=self.step,
            usage=self.usage.model_copy(),
            messages=list(self.messages),
            duration_s=time.monotonic() - started,
        )

    def interrupt(self) -> None:
        """Stop the current model call or tool call; safe to call from any thread. A bash command
        in flight is stopped in the sandbox (Ctrl-C), so the shell is free for the next call."""
        self._interrupt.set()
        self.tools.cancel()

    # -- steps --------------------------------------------------------------------------------
    def _check_limits(self, started: float, step_base: int, token_base: int) -> None:
        cfg = self.config
        if self._interrupt.is_set():
            raise _Stop("interrupted", "interrupted by the user")
        if self.step - step_base >= cfg.max_steps:
            raise _Stop("step_limit", f"reached the step limit ({cfg.max_steps})")
        if cfg.token_budget is not None and self.usage.total_tokens - token_base >= cfg.token_budget:
            raise _Stop("token_budget", f"used {self.usage.total_tokens - token_base} of {cfg.token_budget} tokens")
        if cfg.time_limit_s is not None and time.monotonic() - started >= cfg.time_limit_s:
            raise _Stop("time_limit", f"ran for more than {cfg.time_limit_s:g}s")

    def _compact_if_needed(self, force: bool = False) -> bool:
        compacted = self.context.maybe_compact(self.messages, self._last_context_tokens, self.backend, force)
        if compacted is None:
            return False
        self.apply_compaction(compacted)
        return True

    def apply_compaction(self, compacted: Compaction) -> None:
        """Adopt a compacted history, count the summary request's tokens and emit the events; also
        for a compaction made outside the loop (a forced `/compact`)."""
        self.messages = compacted.messages
        self._last_context_tokens = compacted.event.tokens_after
        compacted.event.step = self.step
        for error in compacted.errors:
            self._emit(ErrorEvent(step=self.step, kind="compaction_error", message=error))
        if compacted.usage is not None:  # the summary's tokens count against the budget, not the steps
            self._record_usage(compacted.usage, "compaction", context_tokens=compacted.event.tokens_after)
        self._emit(compacted.event)

    def _query(self) -> BackendResponse:
        self.step += 1
        estimate = self.context.estimate_tokens(self.messages)
        self._emit(ModelRequest(step=self.step, n_messages=len(self.messages), estimated_context_tokens=estimate))

        def on_delta(kind: str, text: str) -> None:
            event = ReasoningDelta if kind == "reasoning" else ContentDelta
            self._emit(event(step=self.step, text=text))

        for attempt in (1, 2):
            try:
                response = self.backend.complete(
                    self.messages,
                    self.tools.specs(),
                    reasoning_effort=self.config.reasoning_effort,
                    on_delta=on_delta,
                    cancel=self._interrupt,
                )
                break
            except BackendInterrupted:
                raise _Stop("interrupted", "interrupted by the user") from None
            except ContextOverflow as exc:
                # The estimate was off (or the window smaller than configured): compact now, once.
                self._emit(ErrorEvent(step=self.step, kind="context_overflow", message=str(exc)))
                if attempt == 2 or not self._compact_if_needed(force=True):
                    raise
        u = response.usage
        self._last_context_tokens = u.context_tokens
        self.context.observe_usage(self.messages, u.prompt_tokens)
        self._record_usage(u, "step", context_tokens=u.context_tokens)
        return response

    def _record_usage(self, u: Usage, purpose: UsagePurpose, context_tokens: int) -> None:
        """Every model call goes through here: the run's totals (and so `token_budget`) and the
        usage event that --json, trajectories and resume add up must never disagree."""
        event = UsageEvent(
            step=self.step,
            purpose=purpose,
            prompt_tokens=u.prompt_tokens,
            cached_tokens=u.cached_tokens,
            completion_tokens=u.completion_tokens,
            context_tokens=context_tokens,
        )
        self.usage.add(event)
        self._emit(event)

    def _handle(self, response: BackendResponse) -> None:
        message = response.message
        calls = message.tool_calls or []
        # The reply is kept as generated, so the next prompt extends this one token for token.
        self._append(message)
        problems = list(response.format_errors)
        if not problems and not calls and self.config.require_finish_tool:
            problems.append("your reply contained no tool call. Use the tools to work on the task; "
                            "when you are done, call `finish` with a short summary.")
        if response.finish_reason == "length":
            problems.append("your reply was cut off at the output token limit; be more concise.")
        if problems:
            self._format_error(problems, calls)
            return
        self._format_errors = 0
        if not calls:
            raise _Stop("submitted", message.content or "")
        finished: ToolResult | None = None
        for call in calls:
            if finished is not None:
                result = ToolResult(output="not run: `finish` was called earlier in this reply", is_error=True)
            elif self._interrupt.is_set():
                result = ToolResult(output="not run: interrupted by the user", is_error=True)
            else:
                result = self._note_repeats(call, self._run_tool(call))
            self._append(self._tool_message(call, result))
            if result.finish and finished is None:
                finished = result
        if finished is not None:
            raise _Stop("submitted", finished.summary)
        if self._interrupt.is_set():
            raise _Stop("interrupted", "interrupted by the user")

    def _tool_message(self, call: ToolCall, result: ToolResult) -> Message:
        """The observation; a tool's images go with it only to a model that can see them."""
        if result.images and not self.sees_images:
            note = "\n[the image is not shown: this model cannot see images]"
            return Message.tool(result.output + note, tool_call_id=call.id, name=call.name)
        return Message.tool(result.output, tool_call_id=call.id, name=call.name, images=result.images or None)

    def _format_error(self, problems: list[str], calls: list[ToolCall]) -> None:
        self._format_errors += 1
        text = "Format error: " + problems[0] if len(problems) == 1 else "Format errors:\n- " + "\n- ".join(problems)
        self._emit(ErrorEvent(step=self.step, kind="format_error", message=text))
        if self._format_errors > self.config.max_format_errors:
            for call in calls:
                self._append(Message.tool("not run: format error", tool_call_id=call.id, name=call.name))
            raise _Stop("error", f"{self._format_errors} consecutive format errors; last: {text}")
        # Every tool call needs a result; the feedback rides on them, or on a user message.
        if calls:
            for call in calls:
                self._append(Message.tool(f"not run. {text}", tool_call_id=call.id, name=call.name))
        else:
            self._append(Message.user(text))

    def _run_tool(self, call: ToolCall) -> ToolResult:
        event = ToolCallEvent(step=self.step, call_id=call.id, name=call.name, arguments=call.arguments)
        self._emit(event)
        started = time.monotonic()
        decision = self.approver(event) if self.approver else Approval.approve()
        if not decision.approved:
            result = ToolResult(output=f"denied: {decision.reason}", is_error=True)
        else:
            # A tool may not outlive the run's time limit (evals budget wall-clock time per task).
            left = None if self._deadline is None else max(0.0, self._deadline - time.monotonic())
            try:
                result = run_with_deadline(
                    lambda: self.tools.call(call.name, call.arguments, cancel=self._interrupt), left, self._interrupt
                )
            except InterruptedError:
                result = ToolResult(output="interrupted by the user", is_error=True)
            except TimeoutError:
                result = ToolResult(output="stopped: the run's time limit was reached", is_error=True)
        self._emit(
            ToolOutput(
                step=self.step,
                call_id=call.id,
                name=call.name,
                output=result.output,
                exit_code=result.exit_code,
                is_error=result.is_error,
                truncated=result.truncated,
                duration=time.monotonic() - started,
            )
        )
        if result.is_error:
            self._emit(ErrorEvent(step=self.step, kind="tool_error", message=f"{call.name}: {result.output[:500]}"))
        return result

    def _note_repeats(self, call: ToolCall, result: ToolResult) -> ToolResult:
        """A model stuck in a loop repeats the same call and gets the same answer; say so."""
        key = (call.name, json.dumps(call.arguments, sort_keys=True), result.output)
        self._recent_calls = [*self._recent_calls[-(REPEAT_LIMIT - 1):], key]
        if len(self._recent_calls) == REPEAT_LIMIT and len(set(self._recent_calls)) == 1:
            note = (f"\n[note: this is the same call with the same result {REPEAT_LIMIT} times in a row; "
                    "the situation will not change by repeating it. Try a different approach.]")
            return result.model_copy(update={"output": result.output + note})
        return result

    # -- plumbing -----------------------------------------------------------------------------
    def _append(self, message: Message) -> None:
        self.messages.append(message)
        self._emit(MessageAppended(step=self.step, message=message.model_dump(exclude_none=True)))

    def _emit(self, event: Event) -> None:
        if self.on_event is not None:
            self.on_event(event)
