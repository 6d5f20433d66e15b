"""Multi-head latent attention (MLA) with DSA sparse selection over a paged latent cache.

Each token caches one row: kv_a_layernorm(c) [kv_lora_rank] followed by its rotated rope key.
Two mathematically equal ways to attend over that cache:
- expanded (prefill): run kv_b_proj over every visible key to get per-head k_nope and v, then
  ordinary attention with q = [q_nope | q_pe] (256 wide for GLM-5);
- absorbed (decode): fold kv_b_proj's key half into the query (q_nope . W_UK -> latent space) and
  its value half into the output, so attention runs directly on the cached rows (576 wide) and the
  cost per step no longer grows with kv_b_proj x context.
"""

from __future__ import annotations

import torch
from torch import nn

from inference.config import ModelConfig
from inference.forward_batch import AttentionMetadata
from inference.layers.indexer import Indexer
from inference.layers.norm import RMSNorm
from inference.layers.rope import apply_rope

# Batches whose longest per-sequence chunk is at most this many tokens use the absorbed form
# (decode, MTP verification); longer chunks use the expanded form.
ABSORB_MAX_QUERY_LEN = 8


class MLAttention(nn.Module):
    def __init__(self, config: ModelConfig, has_indexer: bool):
        super().__init__()
        self.n_heads = config.num_attention_heads
        self.nope = config.qk_nope_head_dim
        self.rope = config.qk_rope_head_dim
        self.v_dim = config.v_head_dim
        self.rank = config.kv_lora_rank
        self.scale = config.softmax_scale
        h = config.hidden_size
        self.q_a_proj = nn.Linear(h, config.q_lora_rank, bias=False)
        self.q_a_layernorm = RMSNorm(config.q_lora_rank, config.latent_norm_eps)
        self.q_b_proj = nn.Linear(config.q_lora_rank, self.n_heads * config.qk_head_dim, bias=False)
        self.kv_a_proj_with_mqa = nn.Linear(h, self.rank + self.rope, bias=False)
        self.kv_a_layernorm = RMSNorm(self.rank, config.latent_norm_eps)
        self.kv_b_proj = nn.Linear(self.rank, self.n_heads * (self.nope + self.v_dim), bias=False)
        self.o_proj = nn.Linear(self.n_heads * self.v_dim, h, bias=False)
        self.indexer = Indexer(config) if has_indexer else None

    def forward(
        self,
        x: torch.Tensor,
        cos: torch.Tensor,
        sin: torch.Tensor,
        meta: AttentionMetadata,
        latent_cache: torch.Tensor,
        indexer_cache: torch.Tensor | None,
        shared_selection: torch.Tensor | None,
        mode: str = "auto",
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """x [N, hidden] -> (out [N, hidden], the selection mask this layer used)."""
        n = x.shape[0]
        q_latent = self.q_a_layernorm(self.q_a_proj(x))
        q = self.q_b_proj(q_latent).view(n, self.n_heads, self.nope + self.rope)
        q_nope, q_pe = q.split([self.nope, self.rope], dim=-1)
        q_pe = apply_rope(q_pe, cos, sin)
        c, k_pe = self.kv_a_proj_with_mqa(x).split([self.rank, self.rope], dim=-1)
        row = torch.cat([self.kv_a_layernorm(c), apply_rope(k_pe, cos, sin)], dim=-1)
        latent_cache[meta.slot_mapping] = row.to(latent_cache.dtype)

        if self.indexer is not None:
            selection = self.indexer(x, q_latent, cos, sin, meta, indexer_cache)
        else:
            selection = shared_selection
        visible = meta.key_valid if selection is None else selection
        keys = latent_cache[meta.key_slots].to(x.dtype)  # [B, S, rank + rope]

        if mode == "auto":
            mode = "absorbed" if meta.max_query_len <= ABSORB_MAX_QUERY_LEN else "expanded"
        if mode == "absorbed":
            out = self._absorbed(q_nope, q_pe, keys, visible, meta)
        elif mode == "expanded":
            out = self._expanded(q_nope, q_pe, keys, visible, meta)
        else:
            raise ValueError(f"attention mode={mode!r}: expected 'auto', 'absorbed' or 'expanded'")
        return self.o_proj(out.reshape(n, self.n_heads * self.v_dim)), selection

    def _softmax(self, scores: torch.Tensor, visible: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
        # scores [B, H, T, S]; visible [B, T, S]; softmax in fp32 like every reference.
        scores = scores.masked_fill(~visible.unsqueeze(1), float("-inf"))
        return torch.softmax(scores.float(), dim=-1).to(dtype)

    def _expanded(self, q_nope, q_pe, keys, visible, meta: AttentionMetadata) -> torch.Tensor:
        b, s = keys.shape[:2]
        c, k_pe = keys.split([self.rank, self.rope], dim=-1)
        kv = self.kv_b_proj(c).view(b, s, self.n_heads, self.nope + self.v_dim)
        k_nope, v = kv.split([self.nope, self.v_dim], dim=-1)
        k = torch.cat([k_nope, k_pe.unsqueeze(2).expand(b, s, self.n_heads, self.rope)], dim=-1)
        q = meta.to_padded(torch.cat([q_nope, q_pe], dim=-1)).transpose(1, 2)  # [B, H, T, D]
        scores = torch.matmul(q, k.permute(0, 2, 3, 1)) * self.scale  # [B, H, T, S]
        probs = self._softmax(scores, visible, q.dtype)
        out = torch.matmul(probs, v.transpose(1, 2))  # [B, H, T, v_dim]
        return meta.from_padded(out.transpose(1, 2))

    def _absorbed(self, q_nope, q_pe, keys, visible, meta: AttentionMetadata) -> torch.Tensor:
        w = self.kv_b_proj.weight.view(self.n_heads, self.nope + self.v_dim, self.rank)
        w_uk, w_uv = w[:, : self.nope], w[:, self.nope :]
        q_lat = torch.einsum("nhd,hdc->nhc", q_nope, w_uk)  # [N, H, rank]
        q = meta.to_padded(torch.cat([q_lat, q_pe], dim=-1)).transpose(1, 2)  # [B, H, T, rank + rope]
        scores = torch.matmul(q, keys.transpose(1, 2).unsqueeze(1)) * self.scale  # [B, H, T, S]
        probs = self._softmax(scores, visible, q.dtype)
        out_lat = torch.matmul(probs, keys[..., : self.rank].unsqueeze(1))  # [B, H, T, rank]
        out_lat = meta.from_padded(out_lat.transpose(1, 2))  # [N, H, rank]
        return torch.einsum("nhc,hvc->nhv", out_lat, w_uv)
