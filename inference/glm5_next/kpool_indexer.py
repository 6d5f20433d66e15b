"""The k-pool DSA indexer of GLM-5.3-Flash (no RoPE).

Keys are grouped into pools of `index_kpool` consecutive tokens; a complete pool's key is the
softmax-weighted sum of its members' keys (logits: a hidden -> Dh gate plus a learned per-slot
bias `index_kpool_compress_ape`). Each query scores the pools whose last token it can see with
sum_h w_h * relu(q_h . pool_key * Dh^-0.5) (w = weights_proj(x) * H^-0.5), keeps the best
index_topk / index_kpool of them, and attends to their tokens; with
`index_kpool_always_select_tail` it also always sees the tokens of its own incomplete pool.

Returned as a boolean [B, T, L] mask over all L cached positions (the union of the chosen pools'
tokens and the tail), which is what transformers' scatter of the expanded indices builds.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from inference.glm5_next.config import Glm5NextTextConfig


class KPoolIndexer(nn.Module):
    def __init__(self, config: Glm5NextTextConfig):
        super().__init__()
        self.n_heads, self.head_dim = config.index_n_heads, config.index_head_dim
        self.kpool, self.topk = config.index_kpool, config.index_topk
        self.select_tail = config.index_kpool_always_select_tail
        self.wq_b = nn.Linear(config.q_lora_rank, self.n_heads * self.head_dim, bias=False)
        self.wk = nn.Linear(config.hidden_size, self.head_dim, bias=False)
        self.k_norm = nn.LayerNorm(self.head_dim, eps=1e-6)
        self.weights_proj = nn.Linear(config.hidden_size, self.n_heads, bias=False)
        self.index_kpool_compress_ape = nn.Parameter(torch.zeros(self.kpool, self.head_dim))
        self.index_kpool_compress_gate = nn.Parameter(torch.zeros(self.head_dim, config.hidden_size))

    def new_rows(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """x [B, T, hidden] -> (keys, gate logits), each [B, T, Dh]: what the cache keeps per token."""
        return self.k_norm(self.wk(x)), F.linear(x, self.index_kpool_compress_gate)

    def pool_keys(self, keys: torch.Tensor, gates: torch.Tensor) -> torch.Tensor:
        """Cached rows [B, L, Dh] -> keys of the complete pools [B, L // kpool, Dh]."""
        b, n_tok, d = keys.shape
        p = n_tok // self.kpool
        grouped_k = keys[:, : p * self.kpool].reshape(b, p, self.kpool, d)
        logits = gates[:, : p * self.kpool].reshape(b, p, self.kpool, d).float() + self.index_kpool_compress_ape.float()
        return (logits.softmax(dim=2).to(keys.dtype) * grouped_k).sum(dim=2)

    def forward(self, x, q_resid, keys, gates, positions: torch.Tensor) -> torch.Tensor:
        """x [B, T, hidden], q_resid [B, T, q_lora], cached keys/gates [B, L, Dh] (this chunk
        included), positions [T] or [B, T] of the queries -> visibility mask [B, T, L]."""
        b, t, _ = x.shape
        n_tok = keys.shape[1]
        pools = self.pool_keys(keys, gates)  # [B, P, Dh]
        p = pools.shape[1]
        tok = torch.arange(n_tok, device=x.device)
        pos = positions.view(-1, t, 1)
        mask = torch.zeros(b, t, n_tok, dtype=torch.bool, device=x.device)
        if p:
            q = self.wq_b(q_resid).view(b, t, self.n_heads, self.head_dim)
            scores = F.relu(torch.matmul(q.float(), pools.float().transpose(-1, -2).unsqueeze(1)) * self.head_dim**-0.5)
            w = self.weights_proj(x.to(self.weights_proj.weight.dtype)).float() * self.n_heads**-0.5
            index = torch.matmul(w.unsqueeze(-2), scores).squeeze(-2)  # [B, T, P]
            pool_end = torch.arange(p, device=x.device) * self.kpool + self.kpool - 1
            visible = pool_end.view(1, 1, p) <= pos  # a pool is selectable once its last token is visible
            index = index.masked_fill(~visible, torch.finfo(index.dtype).min)
            k = min(self.topk // self.kpool, p)
            chosen = index.topk(k, dim=-1).indices
            picked = torch.zeros(b, t, p, dtype=torch.bool, device=x.device).scatter_(-1, chosen, True) & visible
            mask[..., : p * self.kpool] = picked.repeat_interleave(self.kpool, dim=-1)
        if self.select_tail:
            tail_start = (pos + 1) // self.kpool * self.kpool
            mask |= (tok.view(1, 1, -1) >= tail_start) & (tok.view(1, 1, -1) <= pos)
        return mask
