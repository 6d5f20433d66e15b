"""Run the same function on N virtual ranks (threads, ThreadComm) over one checkpoint."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Callable

import torch

from inference.loader import load_model
from inference.parallel import ParallelState, ThreadComm


def load_ranks(ckpt: Path, world: int, ep: int | None = None, dtype=torch.float64, **kw) -> list:
    comms = ThreadComm.group(world)
    states = [ParallelState(world, r, world if ep is None else ep, comms[r]) for r in range(world)]
    with ThreadPoolExecutor(world) as pool:  # loads are independent; threads only to overlap them
        return list(pool.map(lambda s: load_model(ckpt, dtype=dtype, parallel=s, **kw), states))


def on_ranks(models: list, fn: Callable[[Any, int], Any]) -> list:
    """fn(model, rank) on every rank at once (their collectives meet); results in rank order.
    A rank that raises aborts the group so the others fail instead of waiting."""

    def run(rank: int):
        try:
            return fn(models[rank], rank)
        except BaseException:
            models[rank].parallel.comm.abort()
            raise

    with ThreadPoolExecutor(len(models)) as pool:
        futures = [pool.submit(run, r) for r in range(len(models))]
        return [f.result() for f in futures]
