"""Start the follower ranks of a tensor-parallel engine and watch them (the leader's side).

The leader (rank 0, the process that builds the Engine) spawns ranks 1..N-1 with the "spawn"
start method, as nano-vllm and vLLM do, then joins the process group itself. Under torchrun
(RANK / WORLD_SIZE set) nothing is spawned: the other ranks run `horizon serve` too and become
followers there. A monitor thread waits on the followers' process sentinels and reports a death
at once (vLLM's worker monitor), so the engine fails its requests with the rank and exit code
instead of waiting for a collective to time out.
"""

from __future__ import annotations

import logging
import multiprocessing as mp
import os
import socket
import threading
from dataclasses import dataclass
from multiprocessing.connection import wait
from typing import Callable, Optional

import torch

from inference.parallel.settings import ParallelConfig, torchrun_rank
from inference.parallel.state import ParallelState
from inference.parallel.torch_comm import TorchComm, resolve_backend

log = logging.getLogger(__name__)


class RankFailure(RuntimeError):
    """A rank died, hung past the collective timeout, or raised: the group cannot go on."""


@dataclass(frozen=True)
class RankSpec:
    """Everything a follower needs to load its shard (picklable)."""

    checkpoint: str
    dtype: str
    device: str  # "cpu", or "cuda" (rank r takes cuda:r)
    latent_norm_eps: Optional[float]
    mtp: bool
    world: int
    ep: int
    backend: str
    init_method: str
    timeout_s: float
    threads: Optional[int]
    weight_format: str = "dequant"
    reduce_fp32: bool = True
    attention_dp: bool = False
    split_extras: bool = True

    def state(self, rank: int, comm) -> ParallelState:
        return ParallelState(self.world, rank, self.ep, comm, attention_dp=self.attention_dp,
                             reduce_fp32=self.reduce_fp32, split_extras=self.split_extras)

    def device_of(self, rank: int) -> str:
        return f"cuda:{rank}" if self.device.startswith("cuda") else self.device


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class RankGroup:
    def __init__(self, spec: RankSpec, state: ParallelState, processes: list):
        self.spec = spec
        self.state = state
        self.processes = processes  # mp.Process per follower (empty under torchrun)
        self.failure: Optional[str] = None
        self._stopping = False
        self._monitor: Optional[threading.Thread] = None
        self.leader_threads: Optional[int] = None  # the leader's torch thread count before launch, restored by stop()

    @property
    def device(self) -> str:
        return self.spec.device_of(0)

    @classmethod
    def launch(cls, checkpoint: str, dtype: str, device: str, latent_norm_eps, mtp: bool,
               parallel: ParallelConfig, weight_format: str = "dequant") -> "RankGroup":
        backend = resolve_backend(parallel.backend, torch.device(device))
        run = torchrun_rank()
        if run is not None and run[1] != parallel.world:
            raise ValueError(f"torchrun started {run[1]} ranks but tensor_parallel_size={parallel.world}")
        init = parallel.init_method or ("env://" if run else f"tcp://127.0.0.1:{_free_port()}")
        threads = parallel.threads_per_rank or max(1, (os.cpu_count() or 1) // parallel.world)
        spec = RankSpec(str(checkpoint), dtype, device, latent_norm_eps, mtp, parallel.world, parallel.ep,
                        backend, init, parallel.timeout_s, threads, weight_format,
                        reduce_fp32=parallel.reduce_fp32, attention_dp=parallel.attention_dp,
                        split_extras=parallel.split_extras)
        processes = []
        if run is None:
            from inference.parallel.follower import follower_main

            ctx = mp.get_context("spawn")
            for rank in range(1, parallel.world):
                p = ctx.Process(target=follower_main, args=(rank, spec), name=f"horizon-rank{rank}", daemon=True)
                p.start()
                processes.append(p)
        if parallel.threads_per_rank is not None or not device.startswith("cuda"):
            # NOTE: the leader is a rank too. On CPU it takes the followers' thread count: BLAS splits a
            # GEMM's reduction by the thread count, so a leader with more threads would write
            # replicated KV rows (q_a/kv_a, the indexer keys) that differ from the followers' in the
            # last bits, breaking the bit-identical replication the engine relies on.
            previous_threads = torch.get_num_threads()
            torch.set_num_threads(threads)
        else:
            previous_threads = None
        try:
            comm = TorchComm.init(0, parallel.world, init, backend, parallel.timeout_s)
        except Exception:
            for p in processes:
                p.kill()
            if previous_threads is not None:
                torch.set_num_threads(previous_threads)
            raise
        group = cls(spec, spec.state(0, comm), processes)
        group.leader_threads = previous_threads
        group.start_monitor(lambda reason: None)
        return group

    def start_monitor(self, on_failure: Callable[[str], None]) -> None:
        """Call on_failure(reason) once, from a thread, when a follower process ends unasked."""
        self._on_failure = on_failure
        if self._monitor is not None or not self.processes:
            return

        def watch():
            sentinels = {p.sentinel: (r, p) for r, p in enumerate(self.processes, start=1)}
            ended = wait(list(sentinels))
            if self._stopping:
                return
            rank, proc = sentinels[ended[0]]
            proc.join(timeout=1)
            self.failure = (f"tensor-parallel rank {rank} (pid {proc.pid}) exited with code {proc.exitcode}; "
                            "the engine cannot continue")
            log.error("%s", self.failure)
            self._on_failure(self.failure)

        self._monitor = threading.Thread(target=watch, name="horizon-rank-monitor", daemon=True)
        self._monitor.start()

    def stop(self, timeout_s: float = 10.0) -> None:
        """After the followers were sent Stop (or the group failed): reap them, killing stragglers."""
        self._stopping = True
        if self.leader_threads is not None:
            torch.set_num_threads(self.leader_threads)
        for p in self.processes:
            p.join(timeout=timeout_s)
            if p.is_alive():
                p.kill()
                p.join(timeout=timeout_s)
        self.state.comm.close()

    def exit_codes(self) -> list[Optional[int]]:
        return [p.exitcode for p in self.processes]
