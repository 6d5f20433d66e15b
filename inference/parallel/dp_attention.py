"""Data-parallel attention: each rank attends over its own sequences; tokens meet only in the MoE.

Under DP attention (SGLang --enable-dp-attention, vLLM --data-parallel-size N with expert
parallelism) every rank holds all attention heads, the dense and shared MLPs and the vocab, and its
own sequences' KV pages; only the routed experts are split. Before each MoE layer the ranks'
tokens are all-gathered (padded to the longest rank's count, SGLang's MAX_LEN mode), every rank
routes all of them with its replicated router and runs its own experts, and the partial outputs
are reduce-scattered back to the rows' owners. A rank with no tokens still joins every exchange
(`Glm5ForCausalLM.idle_forward`), as the reference engines' idle batches do.

`DPExchange` is that exchange; the model calls `begin` once per forward with this rank's token
count (one small all-gather tells every rank every count). The engine's step commands already carry
every rank's sub-batch, so the DP model runner `preset`s the counts and `begin` skips the all-gather.
"""

from __future__ import annotations

import torch

from inference.parallel.comm import Comm


class DPExchange:
    def __init__(self, comm: Comm):
        self.comm = comm
        self.sizes: list[int] | None = None  # tokens per rank in the current forward
        self._preset: list[int] | None = None

    def preset(self, sizes: list[int]) -> None:
        """Every rank's token count for the next forward, known to all ranks already (from the command)."""
        if len(sizes) != self.comm.world:
            raise ValueError(f"DP token counts: {len(sizes)} given for {self.comm.world} ranks")
        self._preset = list(sizes)

    def begin(self, num_tokens: int, device: torch.device | str) -> None:
        if self._preset is not None:
            sizes, self._preset = self._preset, None
            if sizes[self.comm.rank] != num_tokens:  # a runner bug: the exchange would misalign rows
                raise RuntimeError(f"DP rank {self.comm.rank}: forward of {num_tokens} tokens, command said {sizes}")
            self.sizes = sizes
            return
        counts = self.comm.all_gather(torch.tensor([num_tokens], dtype=torch.int64, device=device), dim=0)
        self.sizes = [int(c) for c in counts.tolist()]

    @property
    def padded(self) -> int:
        return max(self.sizes)

    def gather(self, x: torch.Tensor) -> torch.Tensor:
        """[n_local, H] -> [world * padded, H]: every rank's tokens, each rank's block padded."""
        pad = self.padded - x.shape[0]
        if pad:
            x = torch.cat([x, x.new_zeros(pad, x.shape[1])])
        return self.comm.all_gather(x.contiguous(), dim=0)

    def pad_rows(self, device) -> torch.Tensor:
        """[world * padded] bool: the rows of `gather`'s result that are padding."""
        row = torch.arange(self.padded, device=device)
        return torch.cat([row >= n for n in self.sizes])

    def scatter(self, partial: torch.Tensor) -> torch.Tensor:
        """Sum every rank's partial outputs for all gathered rows; keep this rank's rows."""
        rank, p = self.comm.rank, self.padded
        return self.comm.reduce_scatter(partial, dim=0)[: self.sizes[rank]] if p else partial[:0]
