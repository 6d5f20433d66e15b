"""Who this process is in a tensor/expert-parallel group, and the slices it owns.

Passed explicitly from `Glm5ForCausalLM(config, parallel)` down to every layer (None = one
process), never read from globals, so one process can hold several virtual ranks (ThreadComm).

Layout (the reference engines' phase-1 layout, ../shared/docs/scaleout.md §1):
- tp ranks split attention heads, the dense / shared-expert intermediate size and the vocab;
- ep groups own contiguous ranges of routed experts ("linear" placement); inside one ep group the
  tp // ep ranks split each of its experts by intermediate size (ep == tp: whole experts per rank,
  ep == 1: every expert TP-split, vLLM's default).

DP attention (scaleout.md §1.4, §4.6) keeps every head on every rank (tp == 1) and splits the
routed experts as above. The "extras" (the embedding, the LM head, the dense MLPs and the shared
expert) are then either split like under TP (`split_extras`, the default: SGLang's
--enable-dp-lm-head with moe_dense_tp_size = world; their tokens are exchanged in
dp_extras.py) or replicated on every rank. `extras_tp` is how many ranks split them.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from inference.parallel.comm import Comm, SingleComm


class ParallelConfigError(ValueError):
    """A parallel layout that the model's shapes cannot take (names the size that does not divide)."""


@dataclass(frozen=True)
class ParallelState:
    world: int = 1
    rank: int = 0
    ep: int = 1  # expert-parallel groups; divides world
    comm: Comm = field(default_factory=SingleComm, compare=False, repr=False)
    # DP attention (dp_attention.py): every head on every rank, each rank on its own sequences; the
    # routed experts split, their tokens exchanged through `dp`.
    attention_dp: bool = False
    dp: "DPExchange | None" = field(default=None, compare=False, repr=False)
    # bf16/fp16 partial sums reduced in fp32 (partial_sums.py); False: in the model dtype.
    reduce_fp32: bool = True
    # Under DP attention: the vocab and the dense/shared MLPs split over the ranks (True) or
    # replicated on each (False). Without DP attention they are always split over the tp ranks.
    split_extras: bool = True

    def __post_init__(self):
        if self.world < 1 or not 0 <= self.rank < self.world:
            raise ParallelConfigError(f"rank {self.rank} of world {self.world}: expected 0 <= rank < world")
        if self.ep < 1 or self.world % self.ep:
            raise ParallelConfigError(f"expert parallel size {self.ep} does not divide the world size {self.world}")
        if self.attention_dp and self.world > 1 and self.dp is None:
            from inference.parallel.dp_attention import DPExchange

            object.__setattr__(self, "dp", DPExchange(self.comm))

    @classmethod
    def single(cls) -> "ParallelState":
        return cls()

    @property
    def tp(self) -> int:
        """Ranks that split the attention heads (1 under DP attention)."""
        return 1 if self.attention_dp else self.world

    @property
    def tp_rank(self) -> int:
        return 0 if self.attention_dp else self.rank

    @property
    def extras_tp(self) -> int:
        """Ranks that split the vocab (embedding, LM head) and the dense / shared-expert MLPs by
        intermediate size: all of them, unless DP attention keeps those replicated."""
        return 1 if self.attention_dp and not self.split_extras else self.world

    @property
    def extras_rank(self) -> int:
        return self.rank if self.extras_tp > 1 else 0

    @property
    def dp_split_extras(self) -> bool:
        """DP attention with split extras: their tokens meet in dp_extras.py's exchanges."""
        return self.dp is not None and self.extras_tp > 1

    @property
    def is_leader(self) -> bool:
        return self.rank == 0

    @property
    def expert_tp(self) -> int:
        """Ranks that split one expert (by intermediate size) inside an ep group."""
        return self.world // self.ep

    @property
    def ep_rank(self) -> int:
        return self.rank // self.expert_tp

    @property
    def expert_tp_rank(self) -> int:
        return self.rank % self.expert_tp

    def split(self, n: int, what: str, parts: int | None = None, index: int | None = None) -> tuple[int, int]:
        """(start, size) of this rank's contiguous share of n units over `parts` ranks (default:
        the extras' ranks, which split the dense and shared-expert intermediate sizes)."""
        parts = self.extras_tp if parts is None else parts
        index = self.extras_rank if index is None else index
        if n % parts:
            raise ParallelConfigError(f"{what} = {n} is not divisible by the parallel size {parts}")
        size = n // parts
        return index * size, size

    def heads(self, n_heads: int) -> tuple[int, int]:
        return self.split(n_heads, "num_attention_heads", self.tp, self.tp_rank)

    def experts(self, n_experts: int) -> tuple[int, int]:
        return self.split(n_experts, "n_routed_experts", self.ep, self.ep_rank)

    def expert_intermediate(self, n: int) -> tuple[int, int]:
        return self.split(n, "moe_intermediate_size", self.expert_tp, self.expert_tp_rank)

    def vocab(self, vocab_size: int) -> tuple[int, int]:
        """Rows of the vocab this rank holds; the vocab is padded up to a multiple of the extras'
        ranks and the padding rows (zeros) are sliced off the gathered logits."""
        per = -(-vocab_size // self.extras_tp)
        return self.extras_rank * per, per
