"""The collectives the sharded model and the engine use, behind one small interface.

- SingleComm: one process, every collective is the identity.
- ThreadComm: N virtual ranks as threads of one process (tests: the sharded code without spawning
  processes). Partials are summed in rank order, p0 + p1 + ..., which for 2 ranks is bit for bit
  what gloo computes.
- TorchComm (torch_comm.py): torch.distributed, NCCL on CUDA or gloo on CPU, with objects (the
  engine's commands) always on a gloo group so they never travel over NCCL.

NOTE: all_reduce returns the reduced tensor and may reduce in place; callers use the result.
Every collective counts its calls and payload bytes (`stats`), which the benchmarks report.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any, Protocol

import torch


@dataclass
class CommStats:
    calls: dict[str, int] = field(default_factory=dict)
    bytes: dict[str, int] = field(default_factory=dict)

    def add(self, op: str, nbytes: int) -> None:
        self.calls[op] = self.calls.get(op, 0) + 1
        self.bytes[op] = self.bytes.get(op, 0) + nbytes

    def reset(self) -> None:
        self.calls.clear()
        self.bytes.clear()


class Comm(Protocol):
    world: int
    rank: int
    stats: CommStats

    def all_reduce(self, t: torch.Tensor) -> torch.Tensor: ...
    def all_gather(self, t: torch.Tensor, dim: int = -1) -> torch.Tensor: ...
    def reduce_scatter(self, t: torch.Tensor, dim: int = 0) -> torch.Tensor: ...
    def gather_to_leader(self, t: torch.Tensor, dim: int = -1) -> torch.Tensor | None: ...
    def broadcast(self, t: torch.Tensor, src: int = 0) -> torch.Tensor: ...
    def broadcast_object(self, obj: Any = None, src: int = 0) -> Any: ...
    def handshake_object(self, obj: Any = None, src: int = 0) -> Any: ...
    def barrier(self) -> None: ...


def _nbytes(t: torch.Tensor) -> int:
    return t.numel() * t.element_size()


class SingleComm:
    world = 1
    rank = 0

    def __init__(self):
        self.stats = CommStats()

    def all_reduce(self, t):
        return t

    def all_gather(self, t, dim=-1):
        return t

    def reduce_scatter(self, t, dim=0):
        return t

    def gather_to_leader(self, t, dim=-1):
        return t

    def broadcast(self, t, src=0):
        return t

    def broadcast_object(self, obj=None, src=0):
        return obj

    handshake_object = broadcast_object

    def barrier(self):
        pass

    def close(self):
        pass


class _Rendezvous:
    """Shared by the ThreadComms of one group: a slot per rank and a barrier."""

    def __init__(self, world: int, timeout_s: float):
        self.world = world
        self.slots: list[Any] = [None] * world
        self.barrier = threading.Barrier(world, timeout=timeout_s)

    def exchange(self, rank: int, value: Any) -> list[Any]:
        self.slots[rank] = value
        self.barrier.wait()
        values = list(self.slots)
        self.barrier.wait()  # nobody overwrites a slot before every rank has read them all
        return values


class ThreadComm:
    """One virtual rank; `ThreadComm.group(n)` makes the n of a group. A rank that raises breaks
    the barrier, so its peers fail (threading.BrokenBarrierError) instead of waiting forever."""

    def __init__(self, rendezvous: _Rendezvous, rank: int):
        self._rv = rendezvous
        self.world = rendezvous.world
        self.rank = rank
        self.stats = CommStats()

    @classmethod
    def group(cls, world: int, timeout_s: float = 120.0) -> list["ThreadComm"]:
        rv = _Rendezvous(world, timeout_s)
        return [cls(rv, r) for r in range(world)]

    def abort(self) -> None:
        self._rv.barrier.abort()

    def all_reduce(self, t):
        self.stats.add("all_reduce", _nbytes(t))
        parts = self._rv.exchange(self.rank, t)
        out = parts[0].clone()
        for p in parts[1:]:
            out += p
        return out

    def all_gather(self, t, dim=-1):
        self.stats.add("all_gather", _nbytes(t))
        return torch.cat(self._rv.exchange(self.rank, t), dim=dim)

    def reduce_scatter(self, t, dim=0):
        """Sum over ranks (rank order), then this rank's 1/world chunk along dim."""
        self.stats.add("reduce_scatter", _nbytes(t))
        parts = self._rv.exchange(self.rank, t)
        out = parts[0].clone()
        for p in parts[1:]:
            out += p
        return out.chunk(self.world, dim=dim)[self.rank].clone()

    def gather_to_leader(self, t, dim=-1):
        self.stats.add("gather", _nbytes(t))
        parts = self._rv.exchange(self.rank, t)
        return torch.cat(parts, dim=dim) if self.rank == 0 else None

    def broadcast(self, t, src=0):
        self.stats.add("broadcast", _nbytes(t))
        return self._rv.exchange(self.rank, t)[src].clone()

    def broadcast_object(self, obj=None, src=0):
        self.stats.add("broadcast_object", 0)
        return self._rv.exchange(self.rank, obj)[src]

    handshake_object = broadcast_object

    def barrier(self):
        self._rv.exchange(self.rank, None)

    def close(self):
        pass
