"""Virtual ranks: the followers as threads of the leader's process, over ThreadComm.

`ParallelConfig(backend="threads")`. Each thread runs the real follower (follower.follow: its own
shard, caches and command loop), only the collectives are in-process rendezvous instead of gloo,
so a multi-rank engine starts without spawning processes or importing torch again: what tests and
simulations on one CPU want. Not for serving (one process, one GIL, CPU only).

A thread that raises records why and aborts the group's rendezvous, so the leader's next
collective fails at once (as a dead follower process makes gloo fail) and the engine reports it.
"""

from __future__ import annotations

import threading
from typing import Callable, Optional

from inference.parallel.comm import ThreadComm
from inference.parallel.launch import RankSpec
from inference.parallel.settings import ParallelConfig
from inference.parallel.state import ParallelState


class ThreadRankGroup:
    def __init__(self, spec: RankSpec, state: ParallelState):
        self.spec = spec
        self.state = state
        self.failure: Optional[str] = None
        self._on_failure: Callable[[str], None] = lambda reason: None
        self._threads: list[threading.Thread] = []
        self._failed: set[int] = set()
        self._stopping = False

    @property
    def processes(self) -> list:
        return []  # none to monitor: a failing thread reports itself

    @property
    def device(self) -> str:
        return self.spec.device_of(0)

    @classmethod
    def launch(cls, checkpoint: str, dtype: str, device: str, latent_norm_eps, mtp: bool,
               parallel: ParallelConfig, weight_format: str = "dequant") -> "ThreadRankGroup":
        if device != "cpu":
            raise ValueError(f"parallel.backend='threads' runs every rank on the CPU; got device={device!r}")
        spec = RankSpec(str(checkpoint), dtype, device, latent_norm_eps, mtp, parallel.world, parallel.ep,
                        "threads", "", parallel.timeout_s, None, weight_format,
                        reduce_fp32=parallel.reduce_fp32, attention_dp=parallel.attention_dp,
                        split_extras=parallel.split_extras)
        comms = ThreadComm.group(parallel.world, timeout_s=parallel.timeout_s)
        group = cls(spec, spec.state(0, comms[0]))
        for rank in range(1, parallel.world):
            thread = threading.Thread(target=group._follow, args=(rank, comms[rank]), name=f"horizon-vrank{rank}",
                                      daemon=True)
            thread.start()
            group._threads.append(thread)
        return group

    def _follow(self, rank: int, comm: ThreadComm) -> None:
        from inference.parallel.follower import follow

        try:
            follow(self.spec, self.spec.state(rank, comm), "cpu")
        except BaseException as exc:
            self._failed.add(rank)
            if self._stopping:
                return
            self.failure = f"virtual rank {rank} failed ({type(exc).__name__}: {exc}); the engine cannot continue"
            comm.abort()  # the leader's next collective fails instead of waiting for the timeout
            self._on_failure(self.failure)

    def start_monitor(self, on_failure: Callable[[str], None]) -> None:
        self._on_failure = on_failure

    def stop(self, timeout_s: float = 10.0) -> None:
        """After the followers were sent Stop (or the group failed): wait for the threads."""
        self._stopping = True
        for thread in self._threads:  # after Stop a follower only has to leave its loop
            thread.join(timeout=min(timeout_s, 2.0))
        if any(t.is_alive() for t in self._threads):  # no Stop reached them (the group failed): release them
            self.state.comm.abort()
            for thread in self._threads:
                thread.join(timeout=timeout_s)
        self.state.comm.close()

    def exit_codes(self) -> list[Optional[int]]:
        """Per follower: 0 when it ended on Stop, 1 when it raised, None while it runs."""
        return [None if t.is_alive() else int(r in self._failed) for r, t in enumerate(self._threads, start=1)]
