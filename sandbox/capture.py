"""Keeps the first and last bytes of a stream of any length in bounded memory."""

from __future__ import annotations

import re

# bash names functions read from stdin "main" in its messages ("main: line 19: cd: ..."); the
# command runs inside such a function, so show what an interactive shell would say instead.
_BASH_PREFIX = re.compile(r"(?m)^main: line \d+: ")


class HeadTailBuffer:
    def __init__(self, limit: int):
        self.head_limit = limit // 2
        self.tail_limit = limit - self.head_limit
        self.head = bytearray()
        self.tail = bytearray()
        self.total = 0

    def feed(self, data: bytes) -> None:
        self.total += len(data)
        room = self.head_limit - len(self.head)
        if room > 0:
            self.head += data[:room]
            data = data[room:]
        if data:
            self.tail += data
            if len(self.tail) > 2 * self.tail_limit:
                del self.tail[:-self.tail_limit]

    def parts(self) -> tuple[bytes, bytes]:
        return bytes(self.head), bytes(self.tail[-self.tail_limit:] if self.tail_limit else b"")


def render_output(head: bytes, tail: bytes, total: int) -> tuple[str, bool]:
    """Decode head+tail as UTF-8 (bad bytes become U+FFFD); mark the cut when bytes were dropped."""
    kept = len(head) + len(tail)
    text = head.decode("utf-8", "replace")
    if total > kept:
        text += (
            f"\n[... {total - kept} bytes cut: the output was {total} bytes; "
            f"showing the first {len(head)} and the last {len(tail)} ...]\n"
        )
    text += tail.decode("utf-8", "replace")
    return _BASH_PREFIX.sub("bash: ", text), total > kept
