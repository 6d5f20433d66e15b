"""The DSA attention step through the `kernels` package (Triton on CUDA, torch references else).

The native path in mla.py / indexer.py scores with batched torch ops and gathers each query row's
selected cache rows itself (fastest on CPU). Through the kernels the selection is a list of cache
slots per query token ([N, K], -1 = none) and the attention kernel gathers those rows:

    slots = kernels.indexer_topk(...).slots          (full layers; shared layers reuse them)
    out_latent = kernels.sparse_mla_attention(...)   (absorbed MLA over the selected rows)

Both paths compute the same function; tests run this one with the kernels' torch references.

With an FP8 cache (kv_formats.py) the kernels are unchanged: the rows they need are dequantized
into a compact model-dtype buffer first and the slots renumbered into it. The indexer reads every
visible key of the batch's sequences anyway, so those are dequantized once; sparse MLA gets only
the distinct selected rows (torch.unique: one host sync per layer, the price of not teaching the
kernels the byte layout yet). A model-dtype cache goes to the kernels in place, as before.
"""

from __future__ import annotations

import torch

from inference.forward_batch import AttentionMetadata


def causal_slots(meta: AttentionMetadata, positions: torch.Tensor) -> torch.Tensor:
    """[N, S] every visible key slot of each token (-1 past its position): the selection when no
    row can see more than index_topk keys."""
    key_pos = torch.arange(meta.max_seq_len, device=positions.device)
    slots = meta.key_slots[meta.seq_of_token]
    return torch.where(key_pos <= positions.unsqueeze(1), slots, -1).to(torch.int32)


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
    from kernels import indexer_topk

    key_pos = torch.arange(meta.max_seq_len, device=positions.device)
    live = key_pos.unsqueeze(0) < meta.seq_lens.unsqueeze(1)
    key_cache = key_rows.dense()
    if key_cache is None:  # quantized: score a dequantized copy of the visible keys, [B * S, D]
        flat_slots = meta.key_slots.reshape(-1)
        key_cache = key_rows.gather(flat_slots)
        local = torch.arange(flat_slots.numel(), device=positions.device).view_as(meta.key_slots)
        key_slots = torch.where(live, local, -1).to(torch.int32)
    else:
        flat_slots = None
        key_slots = torch.where(live, meta.key_slots, -1).to(torch.int32)
    selected = indexer_topk(
        q, head_weights.float(), key_cache, key_slots, meta.seq_of_token, positions, topk, softmax_scale,
        backend=backend,
    ).slots  # fmt: skip
    if flat_slots is None:
        return selected
    return torch.where(selected >= 0, flat_slots[selected.clamp_min(0).long()], -1).to(torch.int32)


def sparse_latent_attention(
    q: torch.Tensor, latent_rows, slots: torch.Tensor, scale: float, rank: int, backend: str
) -> torch.Tensor:
    """q [N, H, rank + rope] (absorbed) -> [N, H, rank] attention output in latent space."""
    from kernels import sparse_mla_attention

    latent_cache = latent_rows.dense()
    if latent_cache is None:  # quantized: dequantize each distinct selected row once
        distinct, local = torch.unique(slots.clamp_min(0), return_inverse=True)
        latent_cache = latent_rows.gather(distinct)
        slots = torch.where(slots >= 0, local, -1).to(torch.int32)

    out, _ = sparse_mla_attention(q, latent_cache, slots, scale, rank, backend=backend)
    return out


def routed_experts(x, gate_up, down, ids, weights, backend: str) -> torch.Tensor:
    from kernels import fused_moe

    return fused_moe(x, gate_up, down, ids, weights, backend=backend)
