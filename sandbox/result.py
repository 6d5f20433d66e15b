"""ExecResult: what one command produced."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ExecResult:
    exit_code: int  # 124 when timed out (like coreutils `timeout`)
    output: str  # stdout and stderr interleaved, decoded as UTF-8 with replacement characters
    timed_out: bool = False
    truncated: bool = False  # output was cut to the limit (head + tail kept, a marker in between)
    duration: float = 0.0  # seconds
    oom_killed: bool = False  # a process of this command was killed by the out-of-memory killer
    output_bytes: int = 0  # how many bytes the command wrote in total, before truncation
    interrupted: bool = False  # stopped by Sandbox.interrupt() (exit code 130, like Ctrl-C)

    @property
    def ok(self) -> bool:
        return self.exit_code == 0 and not self.timed_out
