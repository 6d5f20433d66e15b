"""LocalSandbox: the Sandbox API on the host, in a temporary directory. NO ISOLATION.

For people without Docker, and only by explicit choice: commands run as the current user with
full access to the host's files, network and processes. It gives the same persistent shell,
timeouts, bounded output and file API, so code written against Sandbox runs unchanged.
Paths under the configured workdir (default /workspace) are mapped into the temporary directory
by the file methods; the shell starts there. Linux only (the timeout reaper reads /proc).
"""

from __future__ import annotations

import os
import posixpath
import secrets
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from collections.abc import Sequence
from pathlib import Path

from sandbox.capture import HeadTailBuffer, render_output
from sandbox.config import SandboxConfig
from sandbox.egress_hosts import NetworkMode
from sandbox.errors import SandboxClosed, SandboxError, SandboxTimeout
from sandbox.local_process import LocalProcess
from sandbox.result import ExecResult
from sandbox.shell import SHELL_ARGV, PersistentShell, RawResult, ShellDied


class LocalSandbox:
    """Same API as Sandbox; runs on the host without any isolation."""

    def __init__(self, config: SandboxConfig | None = None, **overrides):
        base = config.model_dump() if config is not None else {}
        self.config = SandboxConfig.model_validate({**base, **overrides})
        if self.config.network is NetworkMode.ALLOWLIST:  # fail closed: the host's network is open
            raise SandboxError("network: 'allowlist' needs a Docker sandbox (its only way out is an egress proxy); "
                               "a LocalSandbox runs on the host and cannot restrict the network")
        self.root = Path(tempfile.mkdtemp(prefix="horizon-local-"))
        self.workdir = self.root / "workspace"
        self.workdir.mkdir()
        self.container_id = f"local-{self.root.name}"
        self._env = {**os.environ, **self.config.env}
        self._lock = threading.RLock()
        self._closed = False
        try:
            self._shell = PersistentShell(self._spawn_shell, start_timeout=self.config.start_timeout,
                                          spool_dir=str(self.root / "spool"), put_file=_put_file)
        except (TimeoutError, ShellDied) as exc:
            shutil.rmtree(self.root, ignore_errors=True)
            raise SandboxTimeout(f"local shell did not start: {exc}") from exc

    @classmethod
    def start(cls, config: SandboxConfig | None = None, **overrides) -> LocalSandbox:
        return cls(config, **overrides)

    def _spawn_shell(self) -> LocalProcess:
        return LocalProcess(SHELL_ARGV, cwd=str(self.workdir), env=self._env)

    def __enter__(self) -> LocalSandbox:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._shell.close()
        shutil.rmtree(self.root, ignore_errors=True)

    @property
    def closed(self) -> bool:
        return self._closed

    def exec(self, command: str, timeout: float | None = None, stdin: str | bytes | None = None,
             output_limit: int | None = None, cancel: threading.Event | None = None) -> ExecResult:
        """Run `command` in the persistent shell; `cancel` works as in Sandbox.exec."""
        timeout = self.config.command_timeout if timeout is None else timeout
        limit = output_limit or self.config.output_limit
        with self._lock:
            self._check_open()
            start = time.monotonic()
            if cancel is not None and cancel.is_set():  # set while waiting for the lock, or before
                return RawResult.not_started().to_exec_result(timeout, start)
            stdin_path = "/dev/null"
            if stdin is not None:
                stdin_path = str(self.root / "spool" / f"in-{secrets.token_hex(8)}")
                Path(stdin_path).write_bytes(stdin.encode() if isinstance(stdin, str) else bytes(stdin))
            try:
                raw = self._shell.run(command, timeout=timeout, stdin_path=stdin_path,
                                      head=limit // 2, tail=limit - limit // 2, cancel=cancel)
            except ShellDied as exc:
                self._shell.restart()
                spool = Path(self._shell.last_spool)
                left = b""
                if spool.is_file():
                    with spool.open("rb") as fh:
                        fh.seek(max(0, spool.stat().st_size - limit))
                        left = fh.read(limit)
                    spool.unlink()
                output, _ = render_output(left, b"", len(left))
                if output and not output.endswith("\n"):
                    output += "\n"
                output += f"[the shell exited (code {exc.exit_code}); a new shell was started: state was reset]\n"
                return ExecResult(exc.exit_code if exc.exit_code is not None else 1, output, False, False,
                                  time.monotonic() - start)
            return raw.to_exec_result(timeout, start)

    def interrupt(self) -> bool:
        """Ctrl-C for the command exec() runs in another thread, as Sandbox.interrupt."""
        return not self._closed and self._shell is not None and self._shell.interrupt()

    def exec_once(self, argv: Sequence[str] | str, timeout: float | None = None, *, user: str | None = None,
                  workdir: str | None = None, output_limit: int | None = None) -> ExecResult:
        self._check_open()
        if user is not None:
            raise SandboxError("LocalSandbox.exec_once: user= is not supported (commands run as the current user)")
        timeout = self.config.command_timeout if timeout is None else timeout
        argv = ["bash", "-c", argv] if isinstance(argv, str) else list(argv)
        buf = HeadTailBuffer(output_limit or self.config.output_limit)
        start = time.monotonic()
        proc = subprocess.Popen(argv, cwd=self._host_path(workdir) if workdir else self.workdir, env=self._env,
                                stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                start_new_session=True)
        timer = threading.Timer(timeout, lambda: _kill_group(proc.pid))
        timer.start()
        try:
            for chunk in iter(lambda: proc.stdout.read1(1 << 16), b""):
                buf.feed(chunk)
            code = proc.wait()
        finally:
            timer.cancel()
            proc.stdout.close()
        duration = time.monotonic() - start
        timed_out = code == -signal.SIGKILL and duration >= timeout
        output, truncated = render_output(*buf.parts(), buf.total)
        return ExecResult(124 if timed_out else code, output, timed_out, truncated, duration, False, buf.total)

    # -- files ---------------------------------------------------------------------------------
    def write_file(self, path: str, data: bytes | str, mode: int = 0o644) -> None:
        self._check_open()
        target = self._host_path(path)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data.encode("utf-8") if isinstance(data, str) else bytes(data))
        target.chmod(mode)

    def read_file(self, path: str) -> bytes:
        self._check_open()
        target = self._host_path(path)
        if not target.is_file():
            raise SandboxError(f"read_file: {path} is not a regular file")
        return target.read_bytes()

    def copy_in(self, host_path, container_path: str) -> str:
        self._check_open()
        return str(_copy(Path(host_path), self._host_path(container_path)))

    def copy_out(self, container_path: str, host_path) -> Path:
        self._check_open()
        return _copy(self._host_path(container_path), Path(host_path))

    def _host_path(self, path: str) -> Path:
        workdir = self.config.workdir.rstrip("/")
        if path == workdir or path.startswith(workdir + "/"):
            return self.workdir / posixpath.relpath(path, workdir)
        return Path(path) if path.startswith("/") else self.workdir / path

    def _check_open(self) -> None:
        if self._closed:
            raise SandboxClosed("local sandbox is closed")


def _copy(src: Path, dest: Path) -> Path:
    """docker-cp semantics: into `dest` when it is an existing directory, else to `dest`."""
    if not src.exists():
        raise SandboxError(f"copy: {src} does not exist")
    final = dest / src.name if dest.is_dir() else dest
    final.parent.mkdir(parents=True, exist_ok=True)
    if src.is_dir():
        shutil.copytree(src, final, symlinks=True, dirs_exist_ok=True)
    else:
        shutil.copy2(src, final)
    return final


def _put_file(path: str, data: bytes) -> None:
    Path(path).write_bytes(data)


def _kill_group(pid: int) -> None:
    try:
        os.killpg(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
