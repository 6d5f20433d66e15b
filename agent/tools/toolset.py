"""ToolSet: the tools of one run, by name. Validates arguments, then calls the tool.

Every failure the model can cause (unknown tool, arguments that are not JSON or do not validate,
a tool that raises or times out) becomes a `ToolResult(is_error=True)` the model reads. Sandbox
failures that end the run (the container died, the sandbox was closed) propagate.

Interrupts are level-triggered: each call gets its own stop event, handed to the tool's
`run_cancellable`, and set by `cancel()` (or when the caller's `cancel` event is already set when
the call starts). It is never cleared, so an interrupt that lands before the tool has started its
work still stops it, even if the caller reuses and clears its own event for the next run.
"""

from __future__ import annotations

import json
import threading
from typing import Any, Iterable

from pydantic import ValidationError

from agent.tools.base import Tool, ToolResult, format_validation_error, run_with_deadline
from inference.chat.messages import ToolSpec

try:  # the sandbox package defines which failures are fatal
    from sandbox.errors import ContainerDied, SandboxClosed

    _FATAL: tuple[type[BaseException], ...] = (ContainerDied, SandboxClosed)
except ImportError:  # pragma: no cover - sandbox is part of the same distribution
    _FATAL = ()


class ToolSet:
    def __init__(self, tools: Iterable[Tool] = ()):
        self._tools: dict[str, Tool] = {}
        # Calls in flight and their stop events, for cancel() from another thread.
        self._running: list[tuple[Tool, threading.Event]] = []
        self._lock = threading.Lock()
        for tool in tools:
            self.add(tool)

    def add(self, tool: Tool) -> None:
        if tool.name in self._tools:
            raise ValueError(f"two tools are named {tool.name!r}")
        self._tools[tool.name] = tool

    def remove(self, name: str) -> None:
        self._tools.pop(name, None)

    def __contains__(self, name: str) -> bool:
        return name in self._tools

    def __getitem__(self, name: str) -> Tool:
        return self._tools[name]

    def __iter__(self):
        return iter(self._tools.values())

    def __len__(self) -> int:
        return len(self._tools)

    @property
    def names(self) -> list[str]:
        return list(self._tools)

    def specs(self) -> list[ToolSpec]:
        return [tool.spec() for tool in self._tools.values()]

    def call(
        self, name: str, raw_args: dict[str, Any] | str | None, cancel: threading.Event | None = None
    ) -> ToolResult:
        """Run one tool call. `cancel` is the caller's interrupt flag: when it is set the call does not
        start, or stops waiting; to stop the tool's work in flight call `cancel()` after setting it
        (as `Agent.interrupt` does)."""
        tool = self._tools.get(name)
        if tool is None:
            available = ", ".join(self._tools) or "(none)"
            return ToolResult(output=f"unknown tool {name!r}; available tools: {available}", is_error=True)
        if isinstance(raw_args, str):
            try:
                raw_args = json.loads(raw_args) if raw_args.strip() else {}
            except json.JSONDecodeError as exc:
                return ToolResult(output=f"arguments for {name} are not valid JSON: {exc}", is_error=True)
        if not isinstance(raw_args, dict):
            return ToolResult(output=f"arguments for {name} must be a JSON object, got {raw_args!r}", is_error=True)
        try:
            args = tool.validate(raw_args)
        except ValidationError as exc:
            return ToolResult(output=format_validation_error(name, exc), is_error=True)
        except ValueError as exc:  # tools with their own schema validation (MCP)
            return ToolResult(output=str(exc), is_error=True)
        # Registered before `cancel` is looked at: an interrupt sets `cancel` and then calls
        # cancel(), so either cancel() sees this entry or the check below sees `cancel` set.
        stop = threading.Event()
        entry = (tool, stop)
        with self._lock:
            self._running.append(entry)
        try:
            if cancel is not None and cancel.is_set():  # interrupted before it started: do not start
                raise InterruptedError("interrupted by the user")
            if tool.manages_timeout:
                result = tool.run_cancellable(args, stop)
            else:
                watched = [stop] if cancel is None else [stop, cancel]
                result = run_with_deadline(lambda: tool.run_cancellable(args, stop),
                                           tool.ctx.limits.tool_timeout_s, watched)
        except _FATAL:
            raise
        except TimeoutError as exc:
            stop.set()  # the abandoned worker may still look at it
            return ToolResult(output=f"{name}: {exc}", is_error=True)
        except InterruptedError:
            stop.set()
            return ToolResult(output=f"{name}: interrupted by the user", is_error=True)
        except Exception as exc:
            return ToolResult(output=f"{name} failed: {type(exc).__name__}: {exc}", is_error=True)
        finally:
            with self._lock:
                self._running.remove(entry)
        return result if isinstance(result, ToolResult) else ToolResult(output=str(result))

    def cancel(self) -> None:
        """Stop the tool calls in flight (from another thread): set each call's stop event, then call
        its tool's `cancel()`."""
        with self._lock:
            running = list(self._running)
        for tool, stop in running:
            stop.set()
            try:
                tool.cancel()
            except Exception:  # the sandbox may be closing; the interrupt must not fail the caller
                pass

    def close(self) -> None:
        for tool in self._tools.values():
            tool.close()
