"""DSA lightning indexer: picks, per query token, the `index_topk` cached tokens it may attend to.

logit[t, s] = sum_h w[t, h] * ReLU(q[t, h] . k[s] / sqrt(d)), with w = weights_proj(x) / sqrt(heads),
computed in fp32 over the keys visible to t (causal); the top-k of each row is the selection.
The layout of q and k is [rope | nope] (opposite to MLA's [nope | rope]); RoPE is interleaved.
The key cache is a row store (kv_formats.py): in the model dtype (transformers' choice) or FP8
with Hadamard-rotated keys; `prepare_query` puts q into the keys' basis (an identity for the
model dtype, where the rotation would be an exact no-op). Why the FP8 store rotates: kv_formats.py.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from inference.config import ModelConfig
from inference.forward_batch import AttentionMetadata
from inference.layers import kernel_path
from inference.layers.rope import RopeTables, deinterleave_rope_rows
from kernels.indexer_topk import stable_topk  # the one tie rule, shared with the GPU path

# Largest [rows, heads, keys] score block materialised at once (fp32: 256 MiB).
MAX_SCORE_ELEMENTS = 1 << 26
# Query rows scored per chunk in prefill (each chunk against the keys up to its last position).
CAUSAL_CHUNK_ROWS = 256
# Up to this many query rows per sequence (decode, MTP verification) score every key in one chunk:
# no host sync (decode graphs capture it), and the causal saving would be nil at that length.
ONE_CHUNK_MAX_ROWS = 16


@dataclass
class TopkSelection:
    """The keys each query row may attend to (native path): `index_topk` positions per row of the
    padded [B, T] query layout. A row that sees fewer keys is padded with masked ones (valid=False);
    every row has at least one valid key."""

    positions: torch.Tensor  # [B, T, K] int64 key positions within the row's sequence
    valid: torch.Tensor  # [B, T, K] bool

    def mask(self, num_keys: int) -> torch.Tensor:
        """[B, T, S] bool: the same selection as a mask over all S keys (the dense forms' input)."""
        b, t, _ = self.positions.shape
        out = torch.zeros(b, t, num_keys, dtype=torch.bool, device=self.positions.device)
        return out.scatter_(-1, self.positions, self.valid)


class Indexer(nn.Module):
    def __init__(self, config: ModelConfig):
        super().__init__()
        self.n_heads = config.index_n_heads
        self.head_dim = config.index_head_dim
        self.rope_dim = config.qk_rope_head_dim
        self.topk = config.index_topk
        self.wq_b = nn.Linear(config.q_lora_rank, self.n_heads * self.head_dim, bias=False)
        self.wk = nn.Linear(config.hidden_size, self.head_dim, bias=False)
        self.k_norm = nn.LayerNorm(self.head_dim, eps=1e-6)
        # transformers keeps weights_proj in fp32 (`_keep_in_fp32_modules`); the loader does too.
        self.weights_proj = nn.Linear(config.hidden_size, self.n_heads, bias=False)
        self.rope_deinterleaved = False

    def deinterleave_rope_rows(self) -> None:
        if not self.rope_deinterleaved:
            deinterleave_rope_rows(self.wq_b.weight, self.head_dim, 0, self.rope_dim)
            deinterleave_rope_rows(self.wk.weight, self.head_dim, 0, self.rope_dim)
            # k_norm acts per channel after wk, so its affine parameters follow the channels.
            deinterleave_rope_rows(self.k_norm.weight, self.head_dim, 0, self.rope_dim)
            deinterleave_rope_rows(self.k_norm.bias, self.head_dim, 0, self.rope_dim)
            self.rope_deinterleaved = True

    def _rotate(self, x: torch.Tensor, rope: RopeTables) -> torch.Tensor:
        rotated = rope.apply(x[..., : self.rope_dim], self.rope_deinterleaved)
        return torch.cat([rotated, x[..., self.rope_dim :]], dim=-1)

    def forward(
        self,
        x: torch.Tensor,
        q_latent: torch.Tensor,
        rope: RopeTables,
        meta: AttentionMetadata,
        key_cache,
        k_proj: torch.Tensor | None = None,
        head_weights: torch.Tensor | None = None,
    ) -> TopkSelection | None:
        """Write this step's keys into key_cache (a row store of head_dim); return the selection.

        k_proj = wk(x) and head_weights = weights_proj(x) may come precomputed from the attention's
        fused input projection. Returns None when no row can see more than `index_topk` keys (then
        every visible key is selected).
        """
        self._write_keys(x, rope, meta, key_cache, k_proj)
        if meta.max_seq_len <= self.topk:
            return None

        n, b, t, s = x.shape[0], meta.key_slots.shape[0], meta.max_query_len, meta.max_seq_len
        q = self._rotate(self.wq_b(q_latent).view(n, self.n_heads, self.head_dim), rope)
        q = key_cache.prepare_query(meta.to_padded(q).float()).reshape(b, t * self.n_heads, self.head_dim)
        keys = meta.gather_keys(key_cache).float()  # [B, S, D]: one key per token, shared by all heads
        if head_weights is None:
            head_weights = self.weights_proj(x.to(self.weights_proj.weight.dtype))
        # ReLU commutes with the positive 1/sqrt(d), so it scales the small [T, H] weights instead
        # of the [T, H, S] scores (as DeepSeek's reference and vLLM do).
        w = meta.to_padded(head_weights.float() * (self.n_heads**-0.5 * self.head_dim**-0.5))  # [B, T, H]
        keys_t = keys.transpose(1, 2)
        if t <= ONE_CHUNK_MAX_ROWS:  # decode / verification: every row against every key, no host sync
            chunks = [(0, t, s)]
        else:
            # Prefill: chunks of query rows, each scored only against the keys up to its last
            # position (causal: about half the work of scoring all S keys), which also bounds the
            # per-head scores, the largest temporary of the step. One host sync for the ranges.
            rows = min(CAUSAL_CHUNK_ROWS, max(1, MAX_SCORE_ELEMENTS // max(1, b * self.n_heads * s)))
            last = meta.to_padded(meta.positions).amax(0).tolist()  # [T] last position in each padded row
            # Keys past a chunk's width are hidden from every row in it.
            chunks = [(r0, min(t, r0 + rows), min(s, max(self.topk, max(last[r0 : r0 + rows]) + 1)))
                      for r0 in range(0, t, rows)]  # fmt: skip
            keys_t = keys_t.contiguous()
        tops = []
        for r0, r1, width in chunks:
            part = self._logits(q[:, r0 * self.n_heads : r1 * self.n_heads], w[:, r0:r1], keys_t[..., :width])
            part = part.view(b, r1 - r0, width).masked_fill_(meta.key_hidden[:, r0:r1, :width], float("-inf"))
            tops.append(stable_topk(part, self.topk))
        top = torch.cat(tops, dim=1) if len(tops) > 1 else tops[0]
        return TopkSelection(top, meta.key_valid.gather(-1, top))

    def _logits(self, q: torch.Tensor, w: torch.Tensor, keys_t: torch.Tensor) -> torch.Tensor:
        """q [B, rows*H, D], w [B, rows, H], keys_t [B, D, S] -> [B*rows, 1, S] weighted ReLU sum."""
        scores = torch.bmm(q, keys_t).relu_()  # [B, rows*H, S]
        return torch.bmm(w.reshape(-1, 1, self.n_heads), scores.view(-1, self.n_heads, keys_t.shape[-1]))

    def _write_keys(self, x, rope, meta, key_cache, k_proj) -> None:
        k_proj = self.wk(x) if k_proj is None else k_proj
        key_cache.write(meta.slot_mapping, self._rotate(self.k_norm(k_proj), rope))

    def select_slots(self, x, q_latent, rope, meta, key_cache, k_proj, head_weights, backend: str) -> torch.Tensor:
        """Kernel path: the same selection as `forward`, as cache slots [N, K] (-1 = none)."""
        self._write_keys(x, rope, meta, key_cache, k_proj)
        if meta.max_seq_len <= self.topk:
            return kernel_path.causal_slots(meta, meta.positions)
        q = self._rotate(self.wq_b(q_latent).view(x.shape[0], self.n_heads, self.head_dim), rope)
        q = key_cache.prepare_query(q)
        if head_weights is None:
            head_weights = self.weights_proj(x.to(self.weights_proj.weight.dtype))
        w = head_weights.float() * self.n_heads**-0.5
        return kernel_path.indexer_slots(
            q.to(key_cache.dtype), w, key_cache, meta, meta.positions, self.topk, self.head_dim**-0.5, backend
        )

