"""How an engine spreads over processes (EngineConfig.parallel), validated at the edge."""

from __future__ import annotations

import os
from typing import Literal, Optional

from pydantic import BaseModel, ConfigDict, Field, model_validator


class ParallelConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    # Ranks (processes, one GPU each on CUDA): attention heads, the dense/shared MLPs and the vocab
    # are split over all of them.
    tensor_parallel_size: int = Field(default=1, ge=1)
    # Expert-parallel groups over those ranks; None = tensor_parallel_size (whole experts per
    # rank, the layout GLM-5.3 on 8 GPUs wants); 1 = every expert split by intermediate size.
    expert_parallel_size: Optional[int] = Field(default=None, ge=1)
    # DP attention (SGLang --enable-dp-attention): every rank runs all attention heads over its own
    # sequences and KV pages; only the routed experts are split (expert_parallel_size as above).
    attention_dp: bool = False
    # Under DP attention, the embedding, LM head, dense MLPs and shared expert: "split" over the
    # ranks by vocab / intermediate size, their rows exchanged (parallel/dp_extras.py; more KV per
    # rank: 374K vs 256K tokens for GLM-5.3 on 8xH200), or "replicated" on every rank (no exchange).
    dp_extras: Literal["split", "replicated"] = "split"
    # "auto": NCCL on CUDA, gloo on CPU. "threads": the ranks are threads of this process over
    # in-process collectives (ThreadComm; CPU only, for tests and simulations).
    backend: Literal["auto", "gloo", "nccl", "threads"] = "auto"
    # Where the ranks rendezvous; None = a free port on 127.0.0.1, or "env://" under torchrun.
    init_method: Optional[str] = None
    # A collective that waits longer than this fails the engine (a hung or dead rank) instead of
    # hanging it; idle followers are kept inside it by heartbeats every heartbeat_s.
    timeout_s: float = Field(default=120.0, gt=0)
    heartbeat_s: float = Field(default=5.0, gt=0)
    # CPU threads per rank; None: followers take cores // ranks, the leader keeps its own setting.
    threads_per_rank: Optional[int] = Field(default=None, ge=1)
    # The precision bf16/fp16 partial sums are reduced in (partial_sums.py): "float32" as DeepSeek's
    # reference (twice the bytes per all-reduce), "model" in the model dtype as vLLM and SGLang.
    reduce_dtype: Literal["float32", "model"] = "float32"

    @model_validator(mode="after")
    def _check(self) -> "ParallelConfig":
        ep = self.expert_parallel_size
        if ep is not None and self.tensor_parallel_size % ep:
            raise ValueError(f"expert_parallel_size={ep} must divide tensor_parallel_size={self.tensor_parallel_size}")
        if self.attention_dp and self.tensor_parallel_size < 2:
            raise ValueError(f"attention_dp needs at least 2 ranks, got tensor_parallel_size={self.tensor_parallel_size}")
        if self.dp_extras != "split" and not self.attention_dp:
            raise ValueError(f"dp_extras={self.dp_extras!r} applies only with attention_dp=True (tensor parallelism "
                             "always splits the vocab and the dense/shared MLPs)")
        if self.heartbeat_s >= self.timeout_s:
            raise ValueError(f"heartbeat_s={self.heartbeat_s} must be below timeout_s={self.timeout_s}")
        return self

    @property
    def world(self) -> int:
        return self.tensor_parallel_size

    @property
    def ep(self) -> int:
        return self.expert_parallel_size or self.tensor_parallel_size

    @property
    def split_extras(self) -> bool:
        return self.dp_extras == "split"

    @property
    def reduce_fp32(self) -> bool:
        return self.reduce_dtype == "float32"


def torchrun_rank() -> Optional[tuple[int, int]]:
    """(rank, world) when this process was started by torchrun (RANK / WORLD_SIZE set), else None."""
    if "RANK" in os.environ and "WORLD_SIZE" in os.environ:
        return int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    return None
