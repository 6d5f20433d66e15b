"""Live progress on stderr: a redrawn bar on a terminal, one line per finished trial otherwise."""

from __future__ import annotations

import sys
import threading

from evals.results import TrialResult


class Progress:
    def __init__(self, total: int, stream=None, enabled: bool = True):
        self.total, self.done, self.resolved, self.errors = total, 0, 0, 0
        self.running: set[str] = set()
        self.stream = stream or sys.stderr
        self.enabled = enabled
        self.tty = bool(getattr(self.stream, "isatty", lambda: False)())
        self._lock = threading.Lock()

    def started(self, label: str) -> None:
        with self._lock:
            self.running.add(label)
            self._draw()

    def finished(self, label: str, result: TrialResult) -> None:
        with self._lock:
            self.running.discard(label)
            self.done += 1
            self.resolved += result.status == "resolved"
            self.errors += result.status == "error"
            if self.enabled and not self.tty:
                cls = f"{result.error_class}: " if result.error_class else ""
                why = f" ({cls}{(result.error or '')[:120]})" if result.status != "resolved" and result.error else ""
                self.stream.write(f"[{self.done}/{self.total}] {label}: {result.status} in {result.seconds:.1f}s{why}\n")
                self.stream.flush()
            self._draw()

    def _draw(self) -> None:
        if not (self.enabled and self.tty):
            return
        width = 30
        filled = int(width * self.done / max(1, self.total))
        running = ", ".join(sorted(self.running))[:60]
        line = (f"\r[{'#' * filled}{'.' * (width - filled)}] {self.done}/{self.total} "
                f"resolved {self.resolved} errors {self.errors} | {running}")
        self.stream.write(line.ljust(120)[:160])
        self.stream.flush()

    def close(self) -> None:
        if self.enabled and self.tty:
            self.stream.write("\n")
            self.stream.flush()
