"""A follower rank: load this rank's shard, then replay the leader's model-runner commands.

The follower never schedules, samples or sees a request: it builds the same caches as the leader
(sizes from the handshake), then executes each broadcast command with the same ModelRunner code
rank 0 runs (under DP attention, DPRankRunner: its own part of each command), until Stop. It
ignores SIGINT (Ctrl-C reaches the whole process group; the leader decides), and exits when the leader stops, dies (the next collective fails) or a collective times
out. Any exception ends the process non-zero, which the leader's monitor reports.
"""

from __future__ import annotations

import signal
import sys

import torch

from inference.parallel.launch import RankSpec
from inference.parallel.state import ParallelState
from inference.parallel.torch_comm import TorchComm

_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16, "float64": torch.float64}


def follower_main(rank: int, spec: RankSpec) -> None:
    """A follower process: join the process group, then `follow`."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if spec.threads:
        torch.set_num_threads(spec.threads)
    device = spec.device_of(rank)
    if device.startswith("cuda"):
        torch.cuda.set_device(device)
    comm = TorchComm.init(rank, spec.world, spec.init_method, spec.backend, spec.timeout_s)
    follow(spec, spec.state(rank, comm), device)


def follow(spec: RankSpec, state: ParallelState, device: str) -> None:
    """Load this rank's shard, size the caches from the leader's handshake, replay commands until Stop.
    Also the body of an in-process virtual rank (thread_ranks.py)."""
    from inference.engine.host_tier import HostTier
    from inference.engine.model_runner import ModelRunner
    from inference.engine.runner_commands import Handshake, Stop
    from inference.kv_cache import PagedKVCache
    from inference.loader import load_model
    from inference.parallel.dp_rank_runner import DPRankRunner

    comm = state.comm
    model = load_model(spec.checkpoint, dtype=_DTYPES[spec.dtype], device=device,
                       latent_norm_eps=spec.latent_norm_eps, mtp=spec.mtp, parallel=state,
                       weight_format=spec.weight_format)
    print(f"horizon: {model.load_stats.describe()}", file=sys.stderr, flush=True)
    hello = comm.handshake_object()
    if not isinstance(hello, Handshake):  # the leader failed before it could size the caches
        comm.close()
        return
    cache = model.new_cache(hello.num_pages, hello.page_size, hello.kv_cache_dtype)
    host_cache = None
    if hello.host_pages:
        host_cache = PagedKVCache(model.config, hello.host_pages, hello.page_size, model.dtype, "cpu", hello.kv_cache_dtype)
    host = HostTier(hello.host_pages, cache, host_cache)
    # DP attention: this rank's own sequences, pages and host tier (commands carry a part per rank).
    runner_class = DPRankRunner if state.attention_dp else ModelRunner
    runner = runner_class(model, cache, hello.page_size, fence=host.fence, host=host)
    with torch.inference_mode():
        while not isinstance(cmd := comm.broadcast_object(), Stop):
            runner.execute(cmd)
    comm.close()


def run_torchrun_follower(spec: RankSpec, rank: int) -> int:
    """`horizon serve` on a torchrun rank other than 0."""
    try:
        follower_main(rank, spec)
    except Exception as exc:  # the leader's next collective fails too; say why here
        print(f"horizon serve: rank {rank} failed: {exc}", file=sys.stderr)
        return 1
    return 0
