"""A local bash subprocess with the AttachedProcess interface, for LocalSandbox."""

from __future__ import annotations

import os
import select
import subprocess
import time

from sandbox.attached import StreamClosed

_STDERR_KEEP = 4096


class LocalProcess:
    def __init__(self, argv: list[str], *, cwd: str, env: dict[str, str]):
        self._proc = subprocess.Popen(argv, cwd=cwd, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                      stderr=subprocess.PIPE, start_new_session=True)
        self.stdout = bytearray()
        self.stderr_tail = bytearray()
        self.closed = False

    def send(self, data: bytes) -> None:
        try:
            self._proc.stdin.write(data)
            self._proc.stdin.flush()
        except OSError as exc:
            raise StreamClosed(f"writing to the local shell failed: {exc}") from exc

    def pump(self, deadline: float) -> bool:
        if self.closed:
            raise StreamClosed("the local shell is closed")
        out, err = self._proc.stdout, self._proc.stderr
        ready, _, _ = select.select([out, err], [], [], min(0.25, max(0.0, deadline - time.monotonic())))
        if not ready:
            return False
        for stream in ready:
            chunk = os.read(stream.fileno(), 1 << 20)
            if stream is err:
                self.stderr_tail += chunk
                del self.stderr_tail[:-_STDERR_KEEP]
            elif not chunk:
                self.closed = True
                self._proc.wait()
                raise StreamClosed("the local shell's output ended")
            else:
                self.stdout += chunk
        return True

    def exit_code(self) -> int | None:
        return self._proc.poll()

    def close(self) -> None:
        self.closed = True
        if self._proc.poll() is None:
            try:
                os.killpg(self._proc.pid, 9)
            except ProcessLookupError:
                pass
        self._proc.wait()
        for stream in (self._proc.stdin, self._proc.stdout, self._proc.stderr):
            try:
                stream.close()
            except OSError:
                pass
