"""Data-parallel attention: each rank attends over its own sequences; tokens meet only in the MoE.

Under DP attention (SGLang --enable-dp-attention, vLLM --data-parallel-size N with expert
parallelism) every rank holds all attention heads and its own sequences' KV pages, and the routed
experts are split. Before each MoE layer the ranks' tokens are all-gathered (padded to the longest
rank's count, SGLang's MAX_LEN mode), every rank routes all of them with its replicated router and
runs its own experts, and the partial outputs are reduce-scattered back to the rows' owners. A
rank with no tokens still joins every exchange (`Glm5ForCausalLM.idle_forward`), as the reference
engines' idle batches do. With split extras (dp_extras.py) the embedding, the dense MLPs and the
LM head exchange their rows through the same object.

`DPExchange` is that exchange; the model calls `begin` once per forward with this rank's token and
logit-row counts (one small all-gather tells every rank every count). The engine's step commands
already carry every rank's sub-batch, so the DP model runner `preset`s the counts (and the token
ids the split embedding needs) and the forward runs no collective for them.
"""

from __future__ import annotations

import torch

from inference.parallel.comm import Comm


class DPExchange:
    def __init__(self, comm: Comm):
        self.comm = comm
        self.sizes: list[int] | None = None  # tokens per rank in the current forward
        self.logit_sizes: list[int] | None = None  # logit rows per rank in the current forward
        self._preset: tuple[list[int], list[int], list[list[int]] | None] | None = None
        self._ids: list[list[int]] | None = None  # every rank's token ids (from the command), or None

    def preset(self, sizes: list[int], logit_sizes: list[int], token_ids: list[list[int]] | None = None) -> None:
        """Every rank's token count, logit rows and (optionally) token ids for the next forward,
        known to all ranks already (from the command)."""
        world = self.comm.world
        if len(sizes) != world or len(logit_sizes) != world:
            raise ValueError(f"DP counts: {len(sizes)} token and {len(logit_sizes)} logit counts for {world} ranks")
        if token_ids is not None and [len(t) for t in token_ids] != list(sizes):
            raise ValueError(f"DP token ids: {[len(t) for t in token_ids]} per rank, counts say {sizes}")
        self._preset = (list(sizes), list(logit_sizes), token_ids)

    def begin(self, num_tokens: int, device: torch.device | str, num_logits: int = 0) -> None:
        rank = self.comm.rank
        if self._preset is not None:
            (sizes, logit_sizes, ids), self._preset = self._preset, None
            if sizes[rank] != num_tokens or logit_sizes[rank] != num_logits:  # a runner bug: rows would misalign
                raise RuntimeError(f"DP rank {rank}: forward of {num_tokens} tokens and {num_logits} logit rows, "
                                   f"command said {sizes} and {logit_sizes}")
            self.sizes, self.logit_sizes, self._ids = sizes, logit_sizes, ids
            return
        counts = self.comm.all_gather(torch.tensor([num_tokens, num_logits], dtype=torch.int64, device=device), dim=0)
        counts = counts.view(-1, 2).tolist()
        self.sizes = [int(c[0]) for c in counts]
        self.logit_sizes = [int(c[1]) for c in counts]
        self._ids = None

    @property
    def padded(self) -> int:
        return max(self.sizes)

    def gather(self, x: torch.Tensor) -> torch.Tensor:
        """[n_local, H] -> [world * padded, H]: every rank's tokens, each rank's block padded."""
        return self._gather_rows(x, self.padded)

    def _gather_rows(self, x: torch.Tensor, rows: int) -> torch.Tensor:
        pad = rows - x.shape[0]
        if pad:
            x = torch.cat([x, x.new_zeros(pad, *x.shape[1:])])
        return self.comm.all_gather(x.contiguous(), dim=0)

    def pad_rows(self, device) -> torch.Tensor:
        """[world * padded] bool: the rows of `gather`'s result that are padding."""
        row = torch.arange(self.padded, device=device)
        return torch.cat([row >= n for n in self.sizes])

    def scatter(self, partial: torch.Tensor) -> torch.Tensor:
        """Sum every rank's partial outputs for all gathered rows; keep this rank's rows."""
        rank, p = self.comm.rank, self.padded
        return self.comm.reduce_scatter(partial, dim=0)[: self.sizes[rank]] if p else partial[:0]

    # ---- split extras (dp_extras.py) ----
    def gather_ids(self, ids: torch.Tensor) -> torch.Tensor:
        """[n_local] token ids -> [world * padded]: every rank's ids, each block padded with 0.
        From the command's ids when preset (this rank's own block from `ids` itself), else one
        all-gather."""
        p = self.padded
        if self._ids is None:
            return self._gather_rows(ids, p)
        every = torch.tensor([part + [0] * (p - len(part)) for part in self._ids], dtype=ids.dtype).to(ids.device)
        every[self.comm.rank, : ids.shape[0]] = ids  # this rank's own block as its batch holds it
        return every.view(-1)

    @property
    def padded_logits(self) -> int:
        return max(self.logit_sizes)

    def gather_logit_rows(self, x: torch.Tensor) -> torch.Tensor:
        """[m_local, H] -> [world * padded_logits, H]: every rank's logit rows."""
        return self._gather_rows(x, self.padded_logits)

    def node_rows(self, blocks: torch.Tensor) -> torch.Tensor:
        """[world * padded_logits, ...] -> the rows that are not padding, rank after rank."""
        p = self.padded_logits
        return torch.cat([blocks[r * p: r * p + n] for r, n in enumerate(self.logit_sizes)])

    def per_rank(self, node: torch.Tensor | None) -> list[torch.Tensor | None]:
        """The node's logit rows (rank-major) -> each rank's, None where a rank had none."""
        out, start = [], 0
        for n in self.logit_sizes:
            out.append(node[start: start + n] if n else None)
            start += n
        return out
