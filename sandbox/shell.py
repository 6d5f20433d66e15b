"""The persistent shell: one attached bash per sandbox, plus a reaper bash for timeouts.

A command costs one write and one read on an already-open socket, instead of the several API
round trips and the process start-up of a `docker exec`. The framing and the bash side are in
shell_protocol.py.

Stopping a command is level-triggered: `run(cancel=event)` and `interrupt()` only raise a flag, and
the thread collecting the command's output reaps its processes once the shell has announced the
command's start, again and again until the command is over. So an interrupt that lands before the
command line is written, or before the command's processes exist, still stops it.
"""

from __future__ import annotations

import secrets
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from sandbox.attached import AttachedProcess, StreamClosed
from sandbox.capture import render_output
from sandbox.result import ExecResult
from sandbox.shell_protocol import (
    INLINE_COMMAND_LIMIT,
    REAPER_PRELUDE,
    SHELL_PRELUDE,
    SPOOL_DIR,
    bash_quote,
    command_file,
    command_line,
    reap_line,
)

SHELL_ARGV = ["bash", "--noprofile", "--norc"]
_ABORT_ROUNDS = 3  # USR1 + kill rounds before the shell is declared stuck and replaced
_ABORT_WAIT = 2.0  # seconds to wait for the shell to come back after each round
_STOP_POLL = 0.05  # how often a running command looks at its stop flag and cancel event
_REAP_AGAIN = 0.5  # an interrupted command still running this long after a reap is reaped again


class ShellDied(Exception):
    """The shell's stream ended mid-command (the command ran `exit`, or the container died)."""

    def __init__(self, exit_code: int | None, stderr: str):
        super().__init__(f"the shell exited (code {exit_code})")
        self.exit_code = exit_code
        self.stderr = stderr


@dataclass
class RawResult:
    exit_code: int
    head: bytes
    tail: bytes
    total_bytes: int
    oom_kills: int
    timed_out: bool
    note: str = ""  # what happened to the shell, if anything noteworthy
    interrupted: bool = False
    started: bool = True  # False: cancelled before the shell was given the command

    @classmethod
    def not_started(cls) -> RawResult:
        """The result of a command whose cancel event was set before it could start."""
        return cls(130, b"", b"", 0, 0, False, interrupted=True, started=False)

    def to_exec_result(self, timeout: float, started: float, oom_note: str = "") -> ExecResult:
        """The caller's view: decoded head+tail plus one bracketed line per thing that went wrong."""
        output, truncated = render_output(self.head, self.tail, self.total_bytes)
        if self.oom_kills and oom_note:
            output += f"\n[{oom_note}]\n"
        if self.timed_out:
            output += f"\n[timed out after {timeout:g}s: the command's processes were killed]\n"
        if self.interrupted:
            output += ("\n[interrupted: the command's processes were killed]\n" if self.started
                       else "[interrupted before it started: the command was not run]\n")
        if self.note:
            output += f"\n[{self.note}]\n"
        return ExecResult(self.exit_code, output, self.timed_out, truncated, time.monotonic() - started,
                          self.oom_kills > 0, self.total_bytes, self.interrupted)


class PersistentShell:
    def __init__(self, spawn: Callable[[], AttachedProcess], *, start_timeout: float, spool_dir: str = SPOOL_DIR,
                 put_file: Callable[[str, bytes], None], adopt_orphans: bool = False):
        """`spawn` starts a bash reading stdin: a `docker exec` for containers, a subprocess locally.
        `put_file(path, data)` writes a file where the shell can read it (for long commands).
        `adopt_orphans`: a stopped command's daemonised processes (reparented to init) are killed
        too; only for a container, whose init and processes are all the sandbox's."""
        self.adopt_orphans = adopt_orphans
        self._spawn_process = spawn
        self._put_file = put_file
        self._start_timeout = start_timeout
        self._spool_dir = spool_dir
        self.shell: AttachedProcess | None = None
        self.reaper: AttachedProcess | None = None
        self.pid = self.uid = self.gid = 0
        self.last_spool = ""
        # The command in flight: its token and its stop flag, swapped as one tuple (interrupt()
        # reads it from another thread).
        self._in_flight: tuple[str, threading.Event] | None = None
        self._reaper_lock = threading.Lock()  # one reap at a time on the reaper shell
        self.start()

    def start(self) -> None:
        deadline = time.monotonic() + self._start_timeout
        self.shell = self._spawn(SHELL_PRELUDE)
        new_reaper = self.reaper is None or self.reaper.closed
        if new_reaper:  # both bashes start up in parallel
            self.reaper = self._spawn(REAPER_PRELUDE)
        self.pid, self.uid, self.gid = self._wait_ready(self.shell, deadline)
        if new_reaper:
            self._wait_ready(self.reaper, deadline)

    def _spawn(self, prelude: str) -> AttachedProcess:
        proc = self._spawn_process()
        proc.send(f"__hz_dir={bash_quote(self._spool_dir)}\n".encode() + prelude.encode())
        return proc

    @staticmethod
    def _wait_ready(proc: AttachedProcess, deadline: float) -> tuple[int, int, int]:
        marker = b"\x1eHZREADY:"
        while True:
            start = proc.stdout.find(marker)
            end = proc.stdout.find(b"\n", start) if start >= 0 else -1
            if end >= 0:
                fields = proc.stdout[start + len(marker):end].decode().split(":")
                del proc.stdout[:end + 1]
                return int(fields[0]), int(fields[1]), int(fields[2])
            if time.monotonic() >= deadline:
                raise TimeoutError("the sandbox shell did not start in time: " + proc.stderr_tail.decode(errors="replace"))
            try:
                proc.pump(deadline)
            except StreamClosed:
                raise ShellDied(proc.exit_code(), proc.stderr_tail.decode(errors="replace")) from None

    def run(self, command: str, *, timeout: float, stdin_path: str, head: int, tail: int,
            cancel: threading.Event | None = None) -> RawResult:
        """Run `command`; once `cancel` is set (before or while it runs) it is stopped as by interrupt()."""
        token = secrets.token_hex(8)
        stop = threading.Event()
        self._in_flight = (token, stop)
        try:
            if cancel is not None and cancel.is_set():
                return RawResult.not_started()

            def stop_requested() -> bool:
                return stop.is_set() or (cancel is not None and cancel.is_set())

            return self._run(token, command, timeout, stdin_path, head, tail, stop_requested)
        finally:
            self._in_flight = None

    def interrupt(self) -> bool:
        """Stop the command in flight (from another thread), as Ctrl-C would; False if none ran.

        Only raises the command's stop flag: the thread in run() reaps the command's processes as
        soon as the shell has started it, so an interrupt racing the command's start is not lost."""
        in_flight = self._in_flight
        if in_flight is None:
            return False
        in_flight[1].set()
        return True

    def _run(self, token: str, command: str, timeout: float, stdin_path: str, head: int, tail: int,
             stop_requested: Callable[[], bool]) -> RawResult:
        self.last_spool = f"{self._spool_dir}/out-{token}"  # read back if the shell dies mid-command
        shell = self.shell
        shell.stdout.clear()
        if stop_requested():  # stopped while exec() got ready (stdin written, lock taken)
            return RawResult.not_started()
        encoded = command.encode("utf-8", "surrogateescape")
        if len(encoded) > INLINE_COMMAND_LIMIT:
            self._put_file(command_file(token, self._spool_dir), encoded)
            shell.send(command_line(token, None, stdin_path, head, tail, self._spool_dir))
        else:
            shell.send(command_line(token, command, stdin_path, head, tail, self._spool_dir))
        deadline = time.monotonic() + timeout
        result = self._collect(token, deadline, head + tail, stop_requested)
        if result is not None:
            return result
        # Timed out: stop everything the command started, then take the shell back.
        for _ in range(_ABORT_ROUNDS):
            self._reap(token)
            result = self._collect(token, time.monotonic() + _ABORT_WAIT, head + tail)
            if result is not None:
                result.timed_out = True
                result.exit_code = 124
                return result
        self._replace_stuck_shell()
        return RawResult(124, b"", b"", 0, 0, True, note="the shell did not stop after the timeout and was replaced: "
                         "working directory, variables and functions were reset")

    def _collect(self, token: str, deadline: float, limit: int,
                 stop_requested: Callable[[], bool] | None = None) -> RawResult | None:
        """The command's result, or None at `deadline`. While `stop_requested()` holds, the command
        is reaped once it has started, and again every _REAP_AGAIN seconds until it is over."""
        shell = self.shell
        header_marker = f"\x1eHZ:{token}:".encode()
        end_marker = f"\x1eHZEND:{token}\n".encode()
        start_marker = f"\x1eHZSTART:{token}\n".encode()
        started = False
        reaped_at: float | None = None  # when an interrupt last reaped this command
        scanned = 0
        while True:
            end = shell.stdout.find(end_marker, max(0, scanned - len(end_marker)))
            if end >= 0:
                result = self._parse(shell.stdout[:end], header_marker, limit)
                if reaped_at is not None:
                    result.interrupted, result.exit_code = True, 130
                return result
            started = started or start_marker in shell.stdout
            if started and stop_requested is not None and stop_requested():
                now = time.monotonic()
                if reaped_at is None or now - reaped_at >= _REAP_AGAIN:
                    self._reap(token)
                    reaped_at = now
                    continue  # the end marker may be in already
            scanned = len(shell.stdout)
            # Nothing but our own head+tail should arrive; never let a misbehaving writer grow memory.
            cap = limit + 65536
            if len(shell.stdout) > 2 * cap:
                del shell.stdout[cap // 2:len(shell.stdout) - cap]
                scanned = len(shell.stdout)
            if time.monotonic() >= deadline:
                return None
            # Short waits while someone may still stop the command, so a stop is acted on promptly.
            wait_until = deadline if stop_requested is None else min(deadline, time.monotonic() + _STOP_POLL)
            try:
                shell.pump(wait_until)
            except StreamClosed:
                raise ShellDied(shell.exit_code(), shell.stderr_tail.decode(errors="replace")) from None

    @staticmethod
    def _parse(buf: bytearray, header_marker: bytes, limit: int) -> RawResult:
        start = buf.find(header_marker)
        nl = buf.find(b"\n", start)
        fields = buf[start + len(header_marker):nl].decode(errors="replace").split(":")
        rc, total, oom = (int(x) if x.lstrip("-").isdigit() else 0 for x in (fields + ["", "", ""])[:3])
        body = bytes(buf[nl + 1:])
        if total <= limit:
            return RawResult(rc, body, b"", total, oom, False)
        head_len = limit // 2
        return RawResult(rc, body[:head_len], body[head_len:], total, oom, False)

    def _reap(self, token: str) -> None:
        with self._reaper_lock:
            reaper = self.reaper
            marker = f"\x1eHZREAPED:{token}\n".encode()
            reaper.stdout.clear()
            reaper.send(reap_line(token, self.pid, self.adopt_orphans))
            deadline = time.monotonic() + 10
            while marker not in reaper.stdout and time.monotonic() < deadline:
                reaper.pump(deadline)

    def _replace_stuck_shell(self) -> None:
        try:
            self.reaper.send(f"kill -KILL {self.pid}\n".encode())
        except StreamClosed:
            pass
        self.shell.close()
        self.start()

    def restart(self) -> None:
        """Start a fresh shell after the old one exited (state is lost)."""
        if self.shell is not None:
            self.shell.close()
        self.start()

    def close(self) -> None:
        for proc in (self.shell, self.reaper):
            if proc is not None:
                proc.close()
