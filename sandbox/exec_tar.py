"""Moving tar archives with `tar` inside the container, over attached execs.

Used when the root file system is read-only: Docker then refuses archive uploads and does not
see the tmpfs mounts that hold the writable workdir.
"""

from __future__ import annotations

import posixpath
import time
from typing import IO

from sandbox.attached import AttachedProcess, StreamClosed
from sandbox.errors import SandboxError


class ExecTar:
    def __init__(self, client, container_id: str, user: str | None, timeout: float):
        self._client, self._id, self._user, self._timeout = client, container_id, user, timeout

    def _run(self, argv: list[str], stdin: IO[bytes] | None = None, sink: IO[bytes] | None = None) -> tuple[int, str]:
        proc = AttachedProcess(self._client, self._id, argv, user=self._user, workdir="/",
                               stdout_sink=sink.write if sink is not None else None)
        try:
            if stdin is not None:
                for chunk in iter(lambda: stdin.read(1 << 20), b""):
                    proc.send(chunk)
            proc.drain(time.monotonic() + self._timeout)
        except StreamClosed:  # the process ended while its input was being sent
            pass
        finally:
            proc.close()
        message = (bytes(proc.stdout) + bytes(proc.stderr_tail)).decode(errors="replace").strip()
        return proc.exit_code() or 0, message

    def kind(self, path: str) -> str | None:
        code, out = self._run(["sh", "-c", 'if [ -d "$1" ]; then echo dir; elif [ -e "$1" ]; then echo file; fi',
                               "sh", path])
        return out or None

    def put(self, parent: str, archive: IO[bytes], what: str) -> None:
        if self.kind(parent) != "dir":
            raise SandboxError(f"cannot write {what}: directory {parent} does not exist in the sandbox")
        code, message = self._run(["tar", "-x", "-f", "-", "-C", parent], stdin=archive)
        if code != 0:
            raise SandboxError(f"cannot write {what}: tar exited with {code}: {message}")

    def get(self, path: str, spool: IO[bytes]) -> None:
        if self.kind(path) is None:
            raise SandboxError(f"{path} does not exist in the sandbox")
        parent, name = posixpath.split(path.rstrip("/") or "/")
        code, message = self._run(["tar", "-c", "-f", "-", "-C", parent or "/", name], sink=spool)
        if code != 0:
            raise SandboxError(f"reading {path} failed: tar exited with {code}: {message}")
