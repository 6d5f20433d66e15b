"""MLA + DSA attention of GLM-5.3-Flash's "indexed_attention" layers (i % 4 == 3), NoPE.

q = q_b(q_a_norm(q_a(x))) [H, nope]; the cache keeps one normalized latent kv_a_norm(kv_a(x))
[kv_lora_rank] per token and expands it with kv_b into per-head keys [nope] and values [v] at
attention time. Which cached tokens a query attends to is the k-pool indexer's mask
(kpool_indexer.py), or on an IndexShare "shared" layer the previous full layer's mask.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from inference.glm5_next.config import Glm5NextTextConfig
from inference.glm5_next.kpool_indexer import KPoolIndexer
from inference.layers.norm import RMSNorm


@dataclass
class DsaState:
    latent: torch.Tensor  # [B, L, kv_lora_rank]
    index_keys: torch.Tensor  # [B, L, Dh]
    index_gates: torch.Tensor  # [B, L, Dh]

    @classmethod
    def empty(cls, config: Glm5NextTextConfig, batch: int, device, dtype) -> DsaState:
        def z(d):
            return torch.zeros(batch, 0, d, device=device, dtype=dtype)

        return cls(z(config.kv_lora_rank), z(config.index_head_dim), z(config.index_head_dim))

    @property
    def length(self) -> int:
        return self.latent.shape[1]

    def append(self, latent, keys, gates, lengths=None):
        """Add this chunk's rows (every row valid: equal-length batch) -> all rows (latent, keys, gates)."""
        self.latent = torch.cat([self.latent, latent], dim=1)
        if keys is not None:
            self.index_keys = torch.cat([self.index_keys, keys], dim=1)
            self.index_gates = torch.cat([self.index_gates, gates], dim=1)
        return self.latent, self.index_keys, self.index_gates


class DsaAttention(nn.Module):
    def __init__(self, config: Glm5NextTextConfig, full_indexer: bool):
        super().__init__()
        self.num_heads, self.nope, self.v_dim = config.num_attention_heads, config.qk_nope_head_dim, config.v_head_dim
        self.scale = config.softmax_scale
        h, bias = config.hidden_size, config.attention_bias
        self.q_a_proj = nn.Linear(h, config.q_lora_rank, bias=bias)
        self.q_a_layernorm = RMSNorm(config.q_lora_rank, config.rms_norm_eps)
        self.q_b_proj = nn.Linear(config.q_lora_rank, self.num_heads * self.nope, bias=False)
        self.kv_a_proj_with_mqa = nn.Linear(h, config.kv_lora_rank, bias=bias)
        self.kv_a_layernorm = RMSNorm(config.kv_lora_rank, config.rms_norm_eps)
        self.kv_b_proj = nn.Linear(config.kv_lora_rank, self.num_heads * (self.nope + self.v_dim), bias=False)
        self.o_proj = nn.Linear(self.num_heads * self.v_dim, h, bias=bias)
        self.indexer = KPoolIndexer(config) if full_indexer else None
        # Chunks of at most this many new tokens (decode) use the absorbed form; 0 = never.
        self.absorb_max_tokens = 1

    def forward(self, x: torch.Tensor, state, positions: torch.Tensor, shared_mask: torch.Tensor | None = None,
                lengths: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """x [B, T, hidden]; `state` (DsaState, or a state pool's view) takes this chunk's rows.
        positions [T] or [B, T]; lengths [B]: valid new tokens per row (right padding), None = all.
        -> (out [B, T, hidden], mask [B, T, L])."""
        b, t, _ = x.shape
        q_resid = self.q_a_layernorm(self.q_a_proj(x))
        q = self.q_b_proj(q_resid).view(b, t, self.num_heads, self.nope).transpose(1, 2)
        latent_new = self.kv_a_layernorm(self.kv_a_proj_with_mqa(x))
        keys_new, gates_new = self.indexer.new_rows(x) if self.indexer is not None else (None, None)
        latent, keys, gates = state.append(latent_new, keys_new, gates_new, lengths)
        if self.indexer is not None:
            mask = self.indexer(x, q_resid, keys, gates, positions)
        elif shared_mask is None:
            raise ValueError("a shared DSA layer needs the selection of the full layer before it")
        else:
            mask = shared_mask
        if t <= self.absorb_max_tokens:
            out = self._absorbed(q, latent, mask)
        else:
            n = latent.shape[1]
            kv = self.kv_b_proj(latent).view(b, n, self.num_heads, self.nope + self.v_dim).transpose(1, 2)
            k, v = kv.split([self.nope, self.v_dim], dim=-1)
            scores = torch.matmul(q, k.transpose(-1, -2)) * self.scale  # [B, H, T, L]
            out = torch.matmul(self._probs(scores, mask, q.dtype), v).transpose(1, 2).reshape(b, t, -1)
        return self.o_proj(out), mask

    @staticmethod
    def _probs(scores: torch.Tensor, mask: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
        scores = scores.masked_fill(~mask.unsqueeze(1), torch.finfo(scores.dtype).min)
        return torch.softmax(scores, dim=-1, dtype=torch.float32).to(dtype)

    def _absorbed(self, q: torch.Tensor, latent: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """Weight-absorbed MLA (decode): fold kv_b's key rows into the query and its value rows
        after the attention, so a step costs O(L x kv_lora_rank) per head instead of expanding
        all L cached latents through kv_b. Same math as the expanded form."""
        b, h, t, _ = q.shape
        w = self.kv_b_proj.weight.view(h, self.nope + self.v_dim, -1)
        w_k, w_v = w[:, : self.nope], w[:, self.nope :]
        q_latent = torch.einsum("bhtn,hnr->bhtr", q, w_k)
        scores = torch.matmul(q_latent, latent.unsqueeze(1).transpose(-1, -2)) * self.scale
        ctx = torch.matmul(self._probs(scores, mask, q.dtype), latent.unsqueeze(1))  # [B, H, T, R]
        return torch.einsum("bhtr,hvr->bthv", ctx, w_v).reshape(b, t, -1)
