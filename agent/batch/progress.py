"""Batch progress: one line per event, plus a live status line when the output is a terminal.

    [3/6] fix-1 fixed (4.2s) | 2 fixed, 1 error
    ⠿ 3 running: fix-4 12s, fix-5 8s, fix-6 2s · 3/6 done          <- rewritten every second (TTY only)
"""

from __future__ import annotations

import sys
import threading
import time
from typing import TextIO


class Progress:
    def __init__(self, total: int, stream: TextIO | None = None, clock=time.monotonic):
        self.total = total
        self.stream = stream or sys.stderr
        self.clock = clock
        self.live = bool(getattr(self.stream, "isatty", lambda: False)())
        self.running: dict[str, float] = {}
        self.counts: dict[str, int] = {}
        self.done = 0
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._ticker: threading.Thread | None = None

    def __enter__(self) -> "Progress":
        if self.live:
            self._ticker = threading.Thread(target=self._tick, name="horizon-progress", daemon=True)
            self._ticker.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        if self._ticker is not None:
            self._ticker.join(2)
        self.say("")  # clears the live line

    def say(self, line: str) -> None:
        with self._lock:
            prefix = "\r\x1b[2K" if self.live else ""
            if line:
                print(prefix + line, file=self.stream, flush=True)
            elif prefix:
                print(prefix, end="", file=self.stream, flush=True)
            if self.live and not self._stop.is_set():
                print(self.status_line(), end="", file=self.stream, flush=True)

    def started(self, job_id: str) -> None:
        self.running[job_id] = self.clock()
        self.say(f"start {job_id}")

    def finished(self, job_id: str, status: str, reason: str | None, duration_s: float) -> None:
        with self._lock:
            self.running.pop(job_id, None)
            self.done += 1
            self.counts[status] = self.counts.get(status, 0) + 1
            tally = ", ".join(f"{n} {s}" for s, n in sorted(self.counts.items()))
            done = self.done
        detail = f": {reason}" if reason else ""
        self.say(f"[{done}/{self.total}] {job_id} {status}{detail} ({duration_s:.1f}s) | {tally}")

    def dropped(self, job_id: str, line: str) -> None:
        self.running.pop(job_id, None)
        self.say(line)

    def status_line(self) -> str:
        now = self.clock()
        jobs = ", ".join(f"{j} {now - t:.0f}s" for j, t in sorted(self.running.items(), key=lambda kv: kv[1]))
        return f"⠿ {len(self.running)} running: {jobs} · {self.done}/{self.total} done"[:200]

    def _tick(self) -> None:
        while not self._stop.wait(1.0):
            with self._lock:
                print("\r\x1b[2K" + self.status_line(), end="", file=self.stream, flush=True)
