"""StdioProcess: a long-lived process in a sandbox that talks in lines over stdin/stdout.

    proc = StdioProcess.start(sandbox, ["python3", "server.py"], env={"TOKEN": "x"})
    proc.send_line('{"jsonrpc": "2.0", ...}')
    reply = proc.read_line(timeout=5)      # None once the process's stdout has ended
    proc.close()                           # close stdin, wait, then kill what is left

In a Docker `Sandbox` the process is a `docker exec` whose stdin/stdout we drive over the attach
socket (as the persistent shell is). In a `LocalSandbox` it is a host subprocess in the local
workspace: the local sandbox has no isolation, and neither has this.

Every process the command starts inherits a private marker variable; `close()` kills each process
in the container that carries it, so a server's children are gone too, even ones that started
their own session. Only the last few KiB of stderr are kept, to explain failures.
"""

from __future__ import annotations

import os
import posixpath
import queue
import secrets
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Protocol

from sandbox.attached import AttachedProcess, StreamClosed
from sandbox.docker_client import connect
from sandbox.errors import SandboxError

MARKER_VAR = "HORIZON_STDIO_ID"
STDERR_KEEP = 4096
MAX_LINE_BYTES = 64 * 1024 * 1024  # a runaway line must not eat the host's memory

# Kills every process whose environment carries MARKER_VAR=$1 (bash builtins and /proc only, so it
# works in any sandbox image; the sandbox's shell already needs bash).
_SWEEP = r'''
want="$1=$2"
for d in /proc/[0-9]*; do
  p=${d#/proc/}
  [[ $p == "$$" ]] && continue
  while IFS= read -r -d '' e; do
    if [[ $e == "$want" ]]; then kill -KILL "$p" 2>/dev/null; echo "$p"; break; fi
  done < "$d/environ" 2>/dev/null
done
'''


class StdioProcessError(SandboxError):
    """The process could not be started, or its output broke the line protocol."""


class _Channel(Protocol):
    """The transport under a StdioProcess: bytes in, stdout chunks out, stderr kept aside."""

    where: str

    def write(self, data: bytes) -> None: ...
    def read(self, deliver: Callable[[bytes], None]) -> bool:
        """Wait briefly for output, passing stdout chunks to `deliver`; False once stdout ended."""
        ...
    def close_stdin(self) -> None: ...
    def running(self) -> bool: ...
    def exit_code(self) -> int | None: ...
    def stderr_tail(self) -> bytes: ...
    def kill(self) -> None: ...
    def release(self) -> None: ...


class StdioProcess:
    """Thread-safe: one thread may read while others write; `close()` may come from any thread."""

    def __init__(self, channel: _Channel, argv: Sequence[str], *, max_line_bytes: int = MAX_LINE_BYTES):
        self.argv = list(argv)
        self._channel = channel
        self._lines: queue.Queue[str | None] = queue.Queue()
        self._partial = bytearray()
        self._max_line = max_line_bytes
        self._failure: str | None = None
        self._write_lock = threading.Lock()
        self._close_lock = threading.Lock()
        self._closed = False
        self._eof = False
        self._reader = threading.Thread(target=self._read_loop, daemon=True, name=f"stdio-{argv[0]}")
        self._reader.start()

    @classmethod
    def start(cls, sandbox, argv: Sequence[str], *, env: dict[str, str] | None = None,
              workdir: str | None = None, max_line_bytes: int = MAX_LINE_BYTES) -> StdioProcess:
        """Start `argv` in `sandbox` (a Sandbox or LocalSandbox) with extra `env`, in `workdir`
        (default: the sandbox's workdir). A stdout line over `max_line_bytes` ends the output
        with an error."""
        from sandbox.docker_sandbox import Sandbox
        from sandbox.local import LocalSandbox

        if not isinstance(sandbox, (Sandbox, LocalSandbox)):
            raise TypeError(f"StdioProcess.start: expected a Sandbox or LocalSandbox, got {type(sandbox).__name__}")
        if not argv:
            raise StdioProcessError("StdioProcess.start: argv is empty")
        env = dict(env or {})
        bad = [key for key in env if not key or "=" in key or "\0" in key]
        if bad:
            raise StdioProcessError(f"StdioProcess.start: invalid environment variable names {bad!r}")
        if sandbox.closed:
            raise StdioProcessError(f"sandbox {sandbox.container_id[:12]} is closed")
        workdir = workdir or sandbox.config.workdir
        if isinstance(sandbox, LocalSandbox):
            channel: _Channel = _HostChannel(argv, env={**os.environ, **sandbox.config.env, **env},
                                             cwd=_local_path(sandbox, workdir))
        else:
            channel = _ContainerChannel(sandbox.config.docker_host, sandbox.container_id, argv, env=env,
                                        user=sandbox.config.user, workdir=workdir)
        return cls(channel, argv, max_line_bytes=max_line_bytes)

    # -- talking -------------------------------------------------------------------------------
    @property
    def where(self) -> str:
        """Where the process runs, in words (for messages)."""
        return self._channel.where

    def send_line(self, line: str) -> None:
        """Write one line (a newline is added; `line` must not contain one)."""
        if "\n" in line:
            raise ValueError("send_line: the line contains a newline")
        with self._write_lock:
            if self._closed:
                raise StdioProcessError("the process is closed")
            try:
                self._channel.write(line.encode("utf-8") + b"\n")
            except (OSError, StreamClosed) as exc:
                raise StdioProcessError(f"writing to {self.argv[0]} failed: {exc}{self.describe_exit()}") from exc

    def read_line(self, timeout: float | None = None) -> str | None:
        """The next stdout line (without its newline), or None once stdout has ended.
        Raises TimeoutError when no line came within `timeout` seconds."""
        if self._eof:
            return self._end()
        try:
            line = self._lines.get(timeout=timeout)
        except queue.Empty:
            raise TimeoutError(f"no output line from {self.argv[0]} within {timeout:g}s") from None
        if line is None:
            self._eof = True
            return self._end()
        return line

    def _end(self) -> None:
        if self._failure is not None:
            raise StdioProcessError(self._failure)
        return None

    def exit_code(self) -> int | None:
        """The exit status, or None while the process runs."""
        return None if self._channel.running() else self._channel.exit_code()

    def stderr_tail(self) -> str:
        return self._channel.stderr_tail().decode("utf-8", errors="replace")

    def describe_exit(self) -> str:
        """' (exit code N)' plus the stderr tail, for error messages; '' while it runs quietly."""
        code = self.exit_code()
        text = f" (exit code {code})" if code is not None else ""
        tail = self.stderr_tail().strip()[-1500:]
        return text + (f"\n--- stderr ---\n{tail}" if tail else "")

    # -- reading -------------------------------------------------------------------------------
    def _read_loop(self) -> None:
        try:
            while self._channel.read(self._deliver):
                if self._failure is not None:
                    break
        except Exception as exc:  # noqa: BLE001 - surfaced to the reader as the end of output
            if not self._closed:
                self._failure = f"reading from {self.argv[0]} failed: {exc}"
        if self._partial and self._failure is None:
            self._lines.put(self._partial.decode("utf-8", errors="replace").rstrip("\r"))
        self._lines.put(None)

    def _deliver(self, chunk: bytes) -> None:
        # Only the new chunk is searched: a long line arriving in many frames stays linear.
        start = 0
        while (end := chunk.find(b"\n", start)) >= 0:
            self._partial += chunk[start:end]
            self._lines.put(self._partial.decode("utf-8", errors="replace").rstrip("\r"))
            self._partial = bytearray()
            start = end + 1
        self._partial += chunk[start:]
        if len(self._partial) > self._max_line:
            self._failure = f"{self.argv[0]} wrote a line longer than {self._max_line} bytes"
            self._partial.clear()

    # -- ending --------------------------------------------------------------------------------
    def close(self, grace_s: float = 2.0) -> None:
        """Close stdin, give the process `grace_s` to exit, then kill it and everything it started.
        Idempotent."""
        with self._close_lock:
            if self._closed:
                return
            self._closed = True
            # A writer stuck on a process that stopped reading holds the lock: then skip to the kill.
            if self._write_lock.acquire(timeout=1.0):
                try:
                    self._channel.close_stdin()
                finally:
                    self._write_lock.release()
                deadline = time.monotonic() + grace_s
                while self._channel.running() and time.monotonic() < deadline:
                    time.sleep(0.02)
            try:
                self._channel.kill()  # also after a clean exit: children may still run
            finally:
                self._reader.join(timeout=2)
                self._channel.release()
                self._reader.join(timeout=2)

    def __enter__(self) -> StdioProcess:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


class _ContainerChannel(_Channel):
    """A `docker exec` with stdin attached; its own Docker client, so no socket is shared."""

    def __init__(self, docker_host: str | None, container_id: str, argv: Sequence[str], *, env: dict[str, str],
                 user: str | None, workdir: str):
        self._client = connect(docker_host)
        self._container_id = container_id
        self._user = user
        self._token = secrets.token_hex(8)
        self.where = f"container {container_id[:12]}"
        self._sink: Callable[[bytes], None] | None = None
        # `env` sets the variables without a shell in between, so argv reaches exec unchanged.
        wrapped = ["env", f"{MARKER_VAR}={self._token}", *(f"{k}={v}" for k, v in env.items()), *argv]
        try:
            self._proc = AttachedProcess(self._client, container_id, wrapped, user=user, workdir=workdir,
                                         stdout_sink=self._to_sink)
        except Exception as exc:
            self._client.close()
            raise StdioProcessError(f"cannot start {argv[0]!r} in container {container_id[:12]}: {exc}") from exc

    def _to_sink(self, data: bytes) -> None:
        if self._sink is not None:
            self._sink(data)

    def write(self, data: bytes) -> None:
        self._proc.send(data)

    def read(self, deliver: Callable[[bytes], None]) -> bool:
        self._sink = deliver
        try:
            self._proc.pump(time.monotonic() + 0.25)
        except StreamClosed:
            return False
        return True

    def close_stdin(self) -> None:
        self._proc.close_stdin()

    def running(self) -> bool:
        try:
            return bool(self._client.api.exec_inspect(self._proc.exec_id).get("Running"))
        except Exception:  # the container is gone
            return False

    def exit_code(self) -> int | None:
        return self._proc.exit_code()

    def stderr_tail(self) -> bytes:
        return bytes(self._proc.stderr_tail)

    def kill(self) -> None:
        try:
            exec_id = self._client.api.exec_create(self._container_id, ["bash", "-c", _SWEEP, "sweep", MARKER_VAR,
                                                                        self._token], user=self._user or "")["Id"]
            self._client.api.exec_start(exec_id)
        except Exception:  # the container is gone, and its processes with it
            pass

    def release(self) -> None:
        self._proc.close()
        try:
            self._client.close()
        except Exception:
            pass


class _HostChannel(_Channel):
    """A host subprocess in its own session (for LocalSandbox); killed as a process group."""

    def __init__(self, argv: Sequence[str], *, env: dict[str, str], cwd: str):
        self.where = "the host (LocalSandbox: no isolation)"
        self._stderr = bytearray()
        try:
            self._proc = subprocess.Popen(list(argv), cwd=cwd, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                          stderr=subprocess.PIPE, start_new_session=True)
        except OSError as exc:
            raise StdioProcessError(f"cannot start {argv[0]!r} on the host: {exc}") from exc
        self._stderr_thread = threading.Thread(target=self._keep_stderr, daemon=True)
        self._stderr_thread.start()

    def _keep_stderr(self) -> None:
        for chunk in iter(lambda: os.read(self._proc.stderr.fileno(), 65536), b""):
            self._stderr += chunk
            del self._stderr[:-STDERR_KEEP]

    def write(self, data: bytes) -> None:
        self._proc.stdin.write(data)
        self._proc.stdin.flush()

    def read(self, deliver: Callable[[bytes], None]) -> bool:
        chunk = os.read(self._proc.stdout.fileno(), 1 << 20)  # release() closes the pipe under us
        if not chunk:
            return False
        deliver(chunk)
        return True

    def close_stdin(self) -> None:
        try:
            self._proc.stdin.close()
        except OSError:
            pass

    def running(self) -> bool:
        return self._proc.poll() is None

    def exit_code(self) -> int | None:
        return self._proc.poll()

    def stderr_tail(self) -> bytes:
        return bytes(self._stderr)

    def kill(self) -> None:
        try:
            os.killpg(self._proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        self._proc.wait()

    def release(self) -> None:
        self._stderr_thread.join(timeout=2)  # before the close, so it never reads a reused descriptor
        for stream in (self._proc.stdin, self._proc.stdout, self._proc.stderr):
            try:
                stream.close()
            except OSError:
                pass


def _local_path(sandbox, workdir: str) -> str:
    """A LocalSandbox maps its configured workdir (e.g. /workspace) onto a host temp dir."""
    base = sandbox.config.workdir.rstrip("/")
    if workdir == base or workdir.startswith(base + "/"):
        return str(Path(sandbox.workdir) / posixpath.relpath(workdir, base))
    return workdir
