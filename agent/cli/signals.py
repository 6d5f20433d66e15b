"""SIGTERM and SIGHUP (`kill`, a closed terminal) stop a command the way Ctrl-C does.

Python's default for them ends the process at once: no `with` block unwinds, so sandbox
containers outlive the command and trajectories miss their end. Inside `on_termination()`:

- with a `stop` callback, the first signal calls it (a graceful stop: the agent is interrupted,
  the session saved) and the next one falls back to the outer handlers;
- without one, the signal raises KeyboardInterrupt in the main thread, so cleanup runs as after
  a second Ctrl-C.

`include_sigint=True` gives Ctrl-C the same first-stop-then-abort behaviour.
"""

from __future__ import annotations

import signal
import threading
from contextlib import contextmanager
from typing import Callable, Iterator, Optional

TERMINATING = (signal.SIGTERM, signal.SIGHUP)


def _raise_keyboard_interrupt(signum, frame):
    raise KeyboardInterrupt


@contextmanager
def on_termination(stop: Optional[Callable[[], None]] = None, *, include_sigint: bool = False) -> Iterator[None]:
    if threading.current_thread() is not threading.main_thread():  # only the main thread may set handlers
        yield
        return
    wanted = (signal.SIGINT, *TERMINATING) if include_sigint else TERMINATING
    # A signal ignored on purpose (`nohup` ignores SIGHUP) stays ignored.
    previous = {signum: signal.getsignal(signum) for signum in wanted if signal.getsignal(signum) != signal.SIG_IGN}

    def restore() -> None:
        for signum, handler in previous.items():
            signal.signal(signum, handler if handler is not None else signal.SIG_DFL)

    def graceful(signum, frame):
        restore()  # a second signal aborts
        stop()

    for signum in previous:
        signal.signal(signum, graceful if stop is not None else _raise_keyboard_interrupt)
    try:
        yield
    finally:
        restore()
