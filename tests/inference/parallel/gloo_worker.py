"""Entry point of the spawned ranks in test_tp_gloo.py (importable by the spawned children)."""

from __future__ import annotations

from pathlib import Path

import torch


def scenario_rank(rank: int, world: int, init_method: str, ckpt: str, out_dir: str) -> None:
    from inference.loader import load_model
    from inference.parallel import ParallelState
    from inference.parallel.torch_comm import TorchComm

    from .scenario import run_scenario

    torch.set_num_threads(1)
    comm = TorchComm.init(rank, world, init_method, "gloo", timeout_s=60)
    model = load_model(ckpt, dtype=torch.float64, parallel=ParallelState(world, rank, world, comm))
    with torch.inference_mode():
        result = run_scenario(model)
    result["collectives"] = dict(comm.stats.calls)
    torch.save(result, Path(out_dir) / f"rank{rank}.pt")
    comm.close()
