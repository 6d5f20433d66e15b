"""Tensor and expert parallelism: who this rank is (state), how ranks talk (comm, torch_comm),
what each rank holds (shard), and the multi-process engine's leader/follower plumbing."""

from inference.parallel.comm import Comm, CommStats, SingleComm, ThreadComm
from inference.parallel.shard import Shard, owns_expert, shard_for, validate_layout
from inference.parallel.state import ParallelConfigError, ParallelState

__all__ = [
    "Comm", "CommStats", "ParallelConfigError", "ParallelState", "Shard", "SingleComm", "ThreadComm",
    "owns_expert", "shard_for", "validate_layout",
]
