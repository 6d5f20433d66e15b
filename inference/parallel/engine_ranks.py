"""The engine's side of tensor parallelism: start the ranks, size their caches, drive them.

Kept out of engine.py so the single-process engine reads as before: `start_ranks` returns None
for one process, and the engine asks this module for its runner.
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable, Optional

from inference.config import ModelConfig
from inference.engine.runner_commands import Handshake
from inference.parallel.distributed_runner import DistributedRunner
from inference.parallel.dp_runner import DPLeaderRunner
from inference.parallel.launch import RankGroup
from inference.parallel.shard import validate_layout
from inference.parallel.state import ParallelState
from inference.parallel.thread_ranks import ThreadRankGroup


def start_ranks(checkpoint: str | Path, config) -> Optional[RankGroup]:
    """Spawn the followers (or join torchrun's) for EngineConfig `config`; None for one process.
    A layout the checkpoint cannot take (heads, experts or intermediate sizes that the sizes do
    not divide) fails here, before any process starts or any weight is read."""
    parallel = config.parallel
    if parallel.world == 1:
        return None
    if config.resolved_decode_graphs() and not (config.device.startswith("cuda") and parallel.backend != "gloo"):
        raise ValueError(f"decode graphs with tensor_parallel_size={parallel.world}: need CUDA and NCCL (gloo's "
                         "in-place collectives can be neither captured nor traced by torch.compile); turn "
                         "decode_graphs off (--no-cuda-graphs) to run these ranks eagerly")
    from inference.glm5_next.describe import is_flash_checkpoint

    if is_flash_checkpoint(Path(checkpoint)):
        if parallel.attention_dp:
            raise ValueError(f"DP attention (--dp / --dp-attention): not supported for GLM-5.3-Flash (glm5_next) "
                             f"checkpoints such as {checkpoint}")
        raise ValueError("tensor_parallel_size > 1: not supported for GLM-5.3-Flash (glm5_next) checkpoints yet")
    model_config = ModelConfig.from_pretrained(Path(checkpoint))
    validate_layout(model_config, ParallelState(parallel.world, 0, parallel.ep, attention_dp=parallel.attention_dp,
                                                split_extras=parallel.split_extras))
    launcher = ThreadRankGroup if parallel.backend == "threads" else RankGroup
    return launcher.launch(str(checkpoint), config.dtype, config.device, config.latent_norm_eps,
                           config.num_speculative_tokens > 0, parallel, config.resolved_weight_format())


def leader_runner(group: RankGroup, model, cache, page_size: int, host, heartbeat_s: float,
                  on_failure: Callable[[str], None]) -> DistributedRunner:
    """Tell the followers the cache sizes (all ranks allocate identical pages), then drive them."""
    group.state.comm.handshake_object(Handshake(cache.num_pages, page_size, cache.kv_cache_dtype,
                                                host.allocator.num_pages))
    runner_class = DPLeaderRunner if group.state.attention_dp else DistributedRunner
    runner = runner_class(model, cache, page_size, group, fence=host.fence, host=host)
    group.start_monitor(on_failure)
    runner.start_heartbeat(heartbeat_s)
    return runner


def abort_ranks(group: RankGroup) -> None:
    """The leader failed before its runner existed: release the followers waiting for the handshake."""
    try:
        group.state.comm.handshake_object(None)
    except Exception:
        pass  # they may be gone already
    group.stop(timeout_s=5.0)


def torchrun_follower(checkpoint: str | Path, config, rank: int) -> int:
    """`horizon serve` under torchrun on a rank other than 0: follow rank 0's engine."""
    import os

    from inference.parallel.follower import run_torchrun_follower
    from inference.parallel.launch import RankSpec
    from inference.parallel.torch_comm import resolve_backend

    import torch

    parallel = config.parallel
    spec = RankSpec(str(checkpoint), config.dtype, config.device, config.latent_norm_eps,
                    config.num_speculative_tokens > 0, parallel.world, parallel.ep,
                    resolve_backend(parallel.backend, torch.device(config.device)),
                    parallel.init_method or "env://", parallel.timeout_s,
                    parallel.threads_per_rank or max(1, (os.cpu_count() or 1) // parallel.world),
                    config.resolved_weight_format(), reduce_fp32=parallel.reduce_fp32,
                    attention_dp=parallel.attention_dp, split_extras=parallel.split_extras)
    return run_torchrun_follower(spec, rank)
