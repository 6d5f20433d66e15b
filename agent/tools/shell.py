"""The `bash` tool (the sandbox's persistent shell) and head+tail truncation of long outputs.

The model sees at most `max_output_chars` characters and `max_output_lines` lines: the head and
the tail, with a marker saying how much was cut. The full output is written to a file inside the
sandbox, whose path the marker gives, so the agent can `view` or `grep` it instead of re-running.
"""

from __future__ import annotations

import itertools
import shlex
import threading
import uuid

from pydantic import BaseModel, Field

from agent.tools.base import Tool, ToolResult

_counter = itertools.count(1)


def truncate_head_tail(text: str, max_chars: int, max_lines: int, saved_to: str | None = None) -> tuple[str, bool]:
    """Keep the first and last halves of `text` within both limits; say what was cut and where the
    full text is."""
    lines = text.splitlines(keepends=True)
    if len(text) <= max_chars and len(lines) <= max_lines:
        return text, False
    half_lines = max_lines // 2
    head_lines, tail_lines = lines[:half_lines], lines[len(lines) - half_lines :] if half_lines else []
    if len(lines) <= max_lines:
        head_lines, tail_lines = lines, []
    head, tail = "".join(head_lines), "".join(tail_lines)
    budget = max_chars // 2
    if len(head) > budget:
        head = head[:budget]
    if len(tail) > budget:
        tail = tail[len(tail) - budget :]
    if not tail_lines and len(text) > max_chars:  # few but very long lines: cut by characters
        head, tail = text[:budget], text[len(text) - budget :]
    cut_chars = len(text) - len(head) - len(tail)
    cut_lines = max(0, len(lines) - head.count("\n") - tail.count("\n"))
    where = f"; the full output ({len(text)} chars, {len(lines)} lines) is in {saved_to}" if saved_to else ""
    marker = f"\n[... {cut_chars} chars / about {cut_lines} lines cut from the middle{where} ...]\n"
    return head.rstrip("\n") + marker + tail.lstrip("\n"), True


class BashArgs(BaseModel):
    command: str = Field(description="the bash command(s) to run")
    timeout: float | None = Field(
        None, gt=0, description="seconds before the command is killed (default 120); use more for builds"
    )


class BashTool(Tool):
    """Run a command in a persistent bash shell in the sandbox (cwd and exported variables persist
    between calls). Output is stdout and stderr together, followed by the exit code. Long output is
    cut in the middle and saved in full to a file whose path is given. Avoid interactive programs;
    run long jobs in the background with output to a log file and poll it."""

    name = "bash"
    Args = BashArgs
    manages_timeout = True

    def __init__(self, ctx):
        super().__init__(ctx)
        self._run_tag = uuid.uuid4().hex[:8]  # a LocalSandbox shares the host's /tmp between runs

    def run(self, args: BashArgs) -> ToolResult:
        return self.run_cancellable(args, None)

    def run_cancellable(self, args: BashArgs, cancel: threading.Event | None) -> ToolResult:
        # The sandbox acts on `cancel` whenever it is set, even before the command has started.
        limits = self.ctx.limits
        timeout = min(args.timeout or limits.bash_timeout_s, limits.max_bash_timeout_s)
        result = self.ctx.sandbox.exec(args.command, timeout=timeout, cancel=cancel)
        output = result.output
        shown, truncated = output, False
        if len(output) > limits.max_output_chars or output.count("\n") > limits.max_output_lines:
            path = self._save_full_output(output)
            shown, truncated = truncate_head_tail(output, limits.max_output_chars, limits.max_output_lines, path)
        notes = []
        if result.truncated:
            notes.append("[the sandbox's capture limit cut this output; redirect to a file to keep all of it]")
        if result.interrupted:
            notes.append(f"[interrupted by the user; exit code: {result.exit_code}]")
        elif result.timed_out:
            said = "timed out" in output[-300:]  # the sandbox may already have said so
            notes.append(
                ("[" if said else f"[timed out after {timeout:g}s; the command was killed. ")
                + "For long jobs pass a larger `timeout`, or run them in the background writing to a log "
                "file and poll it]"
            )
        else:
            notes.append(f"[exit code: {result.exit_code}]")
        text = (shown.rstrip("\n") + "\n" if shown.strip() else "") + "\n".join(notes)
        return ToolResult(
            output=text,
            exit_code=result.exit_code,
            truncated=truncated or bool(result.truncated),
            is_error=bool(result.timed_out),
        )

    def cancel(self) -> None:
        # Ctrl-C for the sandbox's shell: the command in flight is killed, exec() returns, and the
        # shell (cwd, variables, background jobs) stays usable for the next call.
        self.ctx.sandbox.interrupt()

    def _save_full_output(self, output: str) -> str | None:
        folder = self.ctx.limits.full_output_dir
        path = f"{folder}/bash-{self._run_tag}-{next(_counter):04d}.txt"
        try:
            self.ctx.sandbox.write_file(path, output)
        except Exception:  # saving is a convenience; the truncated answer still goes back
            return None
        return shlex.quote(path)
