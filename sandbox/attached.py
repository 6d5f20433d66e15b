"""A long-lived `docker exec` process whose stdin and stdout we drive over the attach socket.

Without a TTY, Docker multiplexes the process's stdout and stderr on the socket in frames
(8-byte header: stream id, 3 zero bytes, big-endian payload length). We keep stdout in a
bounded buffer and only the last few KiB of stderr, for error messages.
"""

from __future__ import annotations

import select
import socket
import struct
import time
from collections.abc import Callable

_STDERR_KEEP = 4096


class StreamClosed(Exception):
    """The process's output stream ended: the process (or its whole container) is gone."""


class AttachedProcess:
    def __init__(self, client, container_id: str, argv: list[str], *, user: str | None, workdir: str | None,
                 stdout_sink: Callable[[bytes], object] | None = None, merge_stderr: bool = False):
        """`stdout_sink`, when given, receives stdout instead of the in-memory buffer (large streams);
        with `merge_stderr`, stderr goes the same way, in order."""
        api = client.api
        self._api = api
        self.exec_id = api.exec_create(
            container_id, argv, stdin=True, stdout=True, stderr=True, tty=False,
            user=user or "", workdir=workdir,
        )["Id"]
        self._wrapper = api.exec_start(self.exec_id, socket=True)
        self._sock: socket.socket = getattr(self._wrapper, "_sock", self._wrapper)
        self._sock.setblocking(False)
        self._raw = bytearray()  # undecoded frame bytes
        self.stdout = bytearray()
        self.stderr_tail = bytearray()
        self.closed = False
        self._sink = stdout_sink
        self._merge_stderr = merge_stderr

    def send(self, data: bytes) -> None:
        view = memoryview(data)
        while view:
            try:
                sent = self._sock.send(view)
            except BlockingIOError:
                select.select([], [self._sock], [], 1.0)
                continue
            except OSError as exc:
                raise StreamClosed(f"writing to the process failed: {exc}") from exc
            view = view[sent:]

    def close_stdin(self) -> None:
        """Signal end of input to the process (half-close of the attach connection)."""
        try:
            self._sock.shutdown(socket.SHUT_WR)
        except OSError:
            pass

    def drain(self, deadline: float) -> None:
        """End the input and read output until the process's stream ends or `deadline` passes."""
        self.close_stdin()
        try:
            while time.monotonic() < deadline:
                self.pump(deadline)
        except StreamClosed:
            pass

    def pump(self, deadline: float) -> bool:
        """Read what is available, waiting briefly (never past `deadline`); False if nothing came."""
        if self.closed:
            raise StreamClosed("the process's output stream is closed")
        # Bounded waits: a close() from another thread does not always wake select(), so look
        # at `closed` again at least every quarter second.
        remaining = min(0.25, max(0.0, deadline - time.monotonic()))
        try:
            ready, _, _ = select.select([self._sock], [], [], remaining)
        except (OSError, ValueError) as exc:  # closed by another thread (Sandbox.close)
            self.closed = True
            raise StreamClosed(f"the process's output stream was closed: {exc}") from exc
        if not ready:
            return False
        try:
            chunk = self._sock.recv(1 << 20)
        except BlockingIOError:
            return True
        except OSError as exc:
            self.closed = True
            raise StreamClosed(f"reading from the process failed: {exc}") from exc
        if not chunk:
            self.closed = True
            raise StreamClosed("the process's output stream ended")
        self._raw += chunk
        self._demux()
        return True

    def _demux(self) -> None:
        raw = self._raw
        pos = 0
        while len(raw) - pos >= 8:
            stream, length = raw[pos], struct.unpack(">I", raw[pos + 4:pos + 8])[0]
            if len(raw) - pos - 8 < length:
                break
            payload = raw[pos + 8:pos + 8 + length]
            if stream == 2 and not self._merge_stderr:
                self.stderr_tail += payload
                del self.stderr_tail[:-_STDERR_KEEP]
            elif self._sink is not None:
                self._sink(bytes(payload))
            else:
                self.stdout += payload
            pos += 8 + length
        del raw[:pos]

    def exit_code(self) -> int | None:
        try:
            return self._api.exec_inspect(self.exec_id).get("ExitCode")
        except Exception:
            return None

    def close(self) -> None:
        self.closed = True
        try:
            self._sock.shutdown(socket.SHUT_RDWR)  # wakes a reader blocked in select() in another thread
        except OSError:
            pass
        for obj in (self._sock, self._wrapper):
            try:
                obj.close()
            except Exception:
                pass
