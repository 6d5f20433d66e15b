"""DP attention with split extras: the embedding, LM head, dense MLPs and shared expert split over
the ranks, each on the tokens of every rank.

Under DP attention a rank runs attention over its own sequences only, so a module split across the
ranks (as under TP) must see every rank's tokens. Keeping these "extras" split instead of
replicated frees 6 GiB per GPU for KV on GLM-5.3 (../shared/docs/scaleout.md §3.2-§3.3: 99.3 GiB
instead of 105.3 GiB of weights per rank; SGLang's --enable-dp-lm-head and moe_dense_tp_size,
vLLM's DP + EP over every rank). The exchanges go through the layer's `DPExchange`:

- embedding (vocab rows [v0, v0 + V/N)): every rank's token ids (from the step command, or one
  all-gather), each rank looks up the ids it owns for all tokens (zeros elsewhere), and one
  reduce-scatter gives each rank its own rows. Exact: each row has one non-zero addend.
- dense MLP (layers before first_k_dense_replace; intermediate size / N): the normed hidden states
  are all-gathered, each rank computes its slice's partial sum for every row, and one
  reduce-scatter sums them back to the rows' owners (in fp32 for bf16, partial_sums.py).
- shared expert: the same split, run inside the MoE on the rows it gathers anyway; its partial is
  added to the routed experts' before their reduce-scatter (moe.py), so a MoE layer still makes
  one exchange.
- LM head (vocab rows / N): every rank's logit rows are all-gathered, each rank computes its vocab
  slice for all of them, and the slices are gathered to the leader, which gets every rank's logit
  rows (rank after rank; `DPExchange.per_rank` splits them) and samples. Followers get None.

A rank with no tokens joins each of these (`Glm5ForCausalLM.idle_forward`): its slices serve the
other ranks' tokens.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from inference.layers.mlp import SwiGLU
from inference.parallel.partial_sums import accumulate_dtype
from inference.parallel.state import ParallelState
from inference.parallel.vocab import ParallelLMHead, VocabParallelEmbedding


class DPVocabEmbedding(VocabParallelEmbedding):
    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        """[n_local] ids -> [n_local, H] (this rank's rows, whole)."""
        every = self.parallel.dp.gather_ids(ids)
        local = every - self.v0
        outside = (local < 0) | (local >= self.weight.shape[0])
        rows = F.embedding(local.masked_fill(outside, 0), self.weight).masked_fill(outside.unsqueeze(-1), 0)
        return self.parallel.dp.scatter(rows)


class DPLMHead(ParallelLMHead):
    def forward(self, x: torch.Tensor) -> torch.Tensor | None:
        """[m_local, H] -> on the leader every rank's logit rows [sum of m, V], rank after rank;
        None on the other ranks."""
        dp = self.parallel.dp
        if dp.padded_logits == 0:  # no rank wants logits (every rank knows the counts): no collective
            return x.new_empty(0, self.vocab_size) if self.parallel.is_leader else None
        rows = dp.gather_logit_rows(x)
        blocks = self.parallel.comm.gather_to_leader(F.linear(rows, self.weight), dim=-1)
        return None if blocks is None else dp.node_rows(blocks)[:, : self.vocab_size]


class DPDenseMLP(SwiGLU):
    """A dense SwiGLU split by intermediate size over the DP ranks (same parameters as SwiGLU)."""

    def __init__(self, hidden_size: int, intermediate_size: int, parallel: ParallelState):
        super().__init__(hidden_size, intermediate_size)
        self.dp = parallel.dp
        self.world, self.reduce_fp32 = parallel.world, parallel.reduce_fp32

    def forward(self, x: torch.Tensor, out_dtype: torch.dtype | None = None) -> torch.Tensor:
        """[n_local, H] -> this rank's rows of the whole MLP output, in `out_dtype` (default x's)."""
        acc = accumulate_dtype(self.world, self.reduce_fp32, x.dtype)
        partial = super().forward(self.dp.gather(x), acc)
        return self.dp.scatter(partial).to(out_dtype or x.dtype)
