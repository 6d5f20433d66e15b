"""The leader's model runner: broadcast each command to the followers, then run it locally.

Exactly the ModelRunner the followers run, plus the control plane. A lock keeps commands in one
order whichever thread sends them (the step loop, or the heartbeat while idle). Any failure of a
collective (a peer gone, a timeout) becomes a RankFailure naming the rank when the monitor knows
it: after that the group's collectives are out of step and the engine must stop.
"""

from __future__ import annotations

import threading
import time

from inference.engine.model_runner import ModelRunner
from inference.engine.runner_commands import Command, Heartbeat, Stop
from inference.parallel.launch import RankFailure, RankGroup


class DistributedRunner(ModelRunner):
    def __init__(self, model, cache, page_size: int, group: RankGroup, fence=lambda: None, host=None):
        super().__init__(model, cache, page_size, fence, host)
        self.group = group
        self.comm = group.state.comm
        self.commands_sent = 0
        self._lock = threading.Lock()
        self._last_send = time.monotonic()
        self._failed: RankFailure | None = None
        self._heartbeat: threading.Thread | None = None
        self._stopped = threading.Event()

    def send(self, cmd: Command) -> None:
        self.comm.broadcast_object(cmd)
        self.commands_sent += 1
        self._last_send = time.monotonic()

    def execute(self, cmd: Command):
        with self._lock:
            if self._failed is not None:
                raise self._failed
            try:
                self.send(cmd)
                return super().execute(cmd)
            except Exception as exc:
                self._failed = self._failure(exc)
                raise self._failed from exc

    def _failure(self, exc: Exception) -> RankFailure:
        # A peer that died makes gloo/NCCL raise at once; give the monitor a moment to say which.
        for _ in range(20):
            if self.group.failure is not None:
                return RankFailure(self.group.failure)
            time.sleep(0.05)
        return RankFailure(f"a tensor-parallel collective failed ({type(exc).__name__}: {exc}); "
                           "the engine cannot continue")

    def start_heartbeat(self, interval_s: float) -> None:
        def beat():
            while not self._stopped.wait(interval_s / 2):
                if time.monotonic() - self._last_send >= interval_s and self._failed is None:
                    try:
                        self.execute(Heartbeat())
                    except RankFailure:
                        return

        self._heartbeat = threading.Thread(target=beat, name="horizon-rank-heartbeat", daemon=True)
        self._heartbeat.start()

    def stop(self) -> None:
        """Tell the followers to exit (best effort when the group already failed), then reap them."""
        if self._stopped.is_set():
            return
        self._stopped.set()
        if self._heartbeat is not None:
            self._heartbeat.join()
        with self._lock:
            if self._failed is None:
                try:
                    self.send(Stop())
                except Exception:
                    pass
        self.group.stop()
