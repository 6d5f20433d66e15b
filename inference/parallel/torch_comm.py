"""The Comm interface over torch.distributed: NCCL on CUDA, gloo on CPU.

Tensors travel on the device group; objects (the leader's commands) on a gloo CPU group, as vLLM
and SGLang keep a `cpu_group` beside the device group, so a pickled command never goes over NCCL.
On CPU one gloo group serves both.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist

from inference.parallel.comm import CommStats, _nbytes


def resolve_backend(backend: str, device: torch.device) -> str:
    if backend not in ("auto", "gloo", "nccl"):
        raise ValueError(f"dist_backend={backend!r}: expected 'auto', 'gloo' or 'nccl'")
    if backend == "auto":
        return "nccl" if device.type == "cuda" else "gloo"
    return backend


class TorchComm:
    def __init__(self, device_group=None, cpu_group=None):
        self.world = dist.get_world_size()
        self.rank = dist.get_rank()
        self.group = device_group
        self.cpu_group = cpu_group if cpu_group is not None else device_group
        self.stats = CommStats()

    @classmethod
    def init(cls, rank: int, world: int, init_method: str, backend: str, timeout_s: float,
             load_timeout_s: float = 3600.0) -> "TorchComm":
        """init_process_group, then the groups every step uses, with the step timeout.

        NOTE: the default group keeps the long load timeout: the handshake after loading waits
        for the slowest rank's shard (minutes for GLM-5.3), while a step collective that waits
        timeout_s means a dead or hung rank."""
        dist.init_process_group(backend, init_method=init_method, rank=rank, world_size=world,
                                timeout=timedelta(seconds=load_timeout_s))
        timeout = timedelta(seconds=timeout_s)
        group = dist.new_group(backend=backend, timeout=timeout)
        cpu_group = dist.new_group(backend="gloo", timeout=timeout) if backend != "gloo" else group
        return cls(group, cpu_group)

    def handshake_object(self, obj: Any = None, src: int = 0) -> Any:
        """broadcast_object on the default group (the load timeout): once, after loading."""
        box = [obj]
        dist.broadcast_object_list(box, src=src)
        return box[0]

    def all_reduce(self, t):
        self.stats.add("all_reduce", _nbytes(t))
        dist.all_reduce(t, group=self.group)
        return t

    def all_gather(self, t, dim=-1):
        self.stats.add("all_gather", _nbytes(t))
        parts = [torch.empty_like(t) for _ in range(self.world)]
        dist.all_gather(parts, t.contiguous(), group=self.group)
        return torch.cat(parts, dim=dim)

    def reduce_scatter(self, t, dim=0):
        """Sum over ranks, then this rank's chunk. gloo has no reduce-scatter: all-reduce and
        slice there (the same sum; twice the bytes, which on a CPU test rig does not matter)."""
        self.stats.add("reduce_scatter", _nbytes(t))
        t = t.contiguous()
        if dist.get_backend(self.group) == "nccl" and dim == 0:
            out = t.new_empty(t.shape[0] // self.world, *t.shape[1:])
            dist.reduce_scatter_tensor(out, t, group=self.group)
            return out
        dist.all_reduce(t, group=self.group)
        return t.chunk(self.world, dim=dim)[self.rank].clone()

    def gather_to_leader(self, t, dim=-1):
        self.stats.add("gather", _nbytes(t))
        t = t.contiguous()
        parts = [torch.empty_like(t) for _ in range(self.world)] if self.rank == 0 else None
        dist.gather(t, parts, dst=0, group=self.group)
        return torch.cat(parts, dim=dim) if self.rank == 0 else None

    def broadcast(self, t, src=0):
        self.stats.add("broadcast", _nbytes(t))
        dist.broadcast(t, src=src, group=self.group)
        return t

    def broadcast_object(self, obj: Any = None, src: int = 0) -> Any:
        self.stats.add("broadcast_object", 0)
        box = [obj]
        dist.broadcast_object_list(box, src=src, group=self.cpu_group)
        return box[0]

    def barrier(self):
        dist.barrier(group=self.cpu_group)

    def close(self) -> None:
        if dist.is_initialized():
            dist.destroy_process_group()
