"""The DSA attention step through the `kernels` package (Triton on CUDA, torch references else).

The native path in mla.py / indexer.py scores with batched torch ops and gathers each query row's
selected cache rows itself (fastest on CPU). Through the kernels the selection is a list of cache
slots per query token ([N, K], -1 = none) and the attention kernel gathers those rows:

    slots = kernels.indexer_topk(...).slots          (full layers; shared layers reuse them)
    out_latent = kernels.sparse_mla_attention(...)   (absorbed MLA over the selected rows)

Both paths compute the same function; tests run this one with the kernels' torch references.

With an FP8 cache (kv_formats.py) the kernels read the bytes in place: the fused indexer top-k
scores the FP8 pages (keys dequantized in registers), sparse MLA gathers the selected
fp8_ds_mla rows and dequantizes only those, in registers. Nothing is expanded per step and there
is no host sync. Where a layout does not fit a kernel (pages whose scales are not 4-byte aligned,
a store that is neither format) the old route remains: dequantize the visible keys / the distinct
selected rows into a compact model-dtype buffer and renumber the slots into it.
"""

from __future__ import annotations

import torch

from inference.forward_batch import AttentionMetadata, live_slots
from inference.kv_formats import Fp8IndexerRows, Fp8LatentRows


def causal_slots(meta: AttentionMetadata, positions: torch.Tensor) -> torch.Tensor:
    """[N, S] every visible key slot of each token (-1 past its position): the selection when no
    row can see more than index_topk keys."""
    key_pos = torch.arange(meta.max_seq_len, device=positions.device)
    slots = meta.key_slots[meta.seq_of_token]
    return torch.where(key_pos <= positions.unsqueeze(1), slots, -1).to(torch.int32)


def _fp8_pages_fit(key_rows) -> bool:
    return isinstance(key_rows, Fp8IndexerRows) and (key_rows.page_size * key_rows.dim) % 4 == 0


def indexer_slots(
    q: torch.Tensor,
    head_weights: torch.Tensor,
    key_rows,
    meta: AttentionMetadata,
    positions: torch.Tensor,
    topk: int,
    softmax_scale: float,
    backend: str,
) -> torch.Tensor:
    """Selected cache slots [N, min(topk, S)] (-1 = none). q is in the keys' basis (prepare_query)."""
    from kernels import indexer_topk
    from kernels.indexer_topk_fused import indexer_topk_fp8

    key_slots = meta.live_key_slots if meta.live_key_slots is not None else live_slots(meta.key_slots, meta.seq_lens)
    w = head_weights.float()
    key_cache = key_rows.dense()
    if key_cache is not None:
        return indexer_topk(q, w, key_cache, key_slots, meta.seq_of_token, positions, topk, softmax_scale,
                            backend=backend).slots  # fmt: skip
    if _fp8_pages_fit(key_rows):  # the FP8 pages in place
        return indexer_topk_fp8(q, w, key_rows.storage, key_rows.page_size, key_slots, meta.seq_of_token, positions,
                                topk, softmax_scale, backend=backend).slots  # fmt: skip
    # Fallback: score a dequantized copy of the visible keys, [B * S, D].
    flat_slots = meta.key_slots.reshape(-1)
    local = torch.arange(flat_slots.numel(), device=positions.device).view_as(meta.key_slots)
    selected = indexer_topk(
        q, w, key_rows.gather(flat_slots), torch.where(key_slots >= 0, local, -1).to(torch.int32), meta.seq_of_token,
        positions, topk, softmax_scale, backend=backend,
    ).slots  # fmt: skip
    return torch.where(selected >= 0, flat_slots[selected.clamp_min(0).long()], -1).to(torch.int32)


def sparse_latent_attention(
    q: torch.Tensor, latent_rows, slots: torch.Tensor, scale: float, rank: int, backend: str
) -> torch.Tensor:
    """q [N, H, rank + rope] (absorbed) -> [N, H, rank] attention output in latent space."""
    from kernels import sparse_mla_attention
    from kernels.sparse_mla_fp8 import sparse_mla_fp8_attention

    latent_cache = latent_rows.dense()
    if latent_cache is not None:
        return sparse_mla_attention(q, latent_cache, slots, scale, rank, backend=backend)[0]
    if isinstance(latent_rows, Fp8LatentRows) and latent_rows.dtype == q.dtype:  # the FP8 rows in place
        return sparse_mla_fp8_attention(q, latent_rows.flat, slots, scale, rank, backend=backend)[0]
    # Fallback: dequantize each distinct selected row once (torch.unique: a host sync).
    distinct, local = torch.unique(slots.clamp_min(0), return_inverse=True)
    compact = latent_rows.gather(distinct)
    return sparse_mla_attention(q, compact, torch.where(slots >= 0, local, -1).to(torch.int32), scale, rank,
                                backend=backend)[0]  # fmt: skip


def routed_experts(x, gate_up, down, ids, weights, backend: str) -> torch.Tensor:
    from kernels import fused_moe

    return fused_moe(x, gate_up, down, ids, weights, backend=backend)
