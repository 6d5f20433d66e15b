"""Sparse MLA attention reading ``fp8_ds_mla`` latent rows straight from the paged FP8 cache.

Same contract as ``sparse_mla_attention`` (kernels/sparse_mla.py), but the cache is the uint8
rows of kernels/fp8_cache.py: e4m3 latent | fp32 scale per 128 values | rope in the model dtype.
The Triton kernel is the same online-softmax kernel, told (FP8=True) to dequantize each gathered
row in registers, so an FP8 cache is never expanded into a model-dtype copy. The torch reference
is dequantize-the-selected-rows-then-attend.
"""

from __future__ import annotations

import torch

from kernels.backend import resolve_backend
from kernels.fp8_cache import E4M3, SCALE_BYTES, check_latent_rows, dequantize_latent_rows, num_scale_blocks
from kernels.sparse_mla import launch_sparse_mla, sparse_mla_torch
from kernels.validate import FLOAT_DTYPES, INDEX_DTYPES, check_same_device, check_tensor


def _views(rows: torch.Tensor, rank: int, dtype: torch.dtype):
    row_bytes = rows.shape[-1]
    scale_end = rank + SCALE_BYTES * num_scale_blocks(rank)
    item = dtype.itemsize
    if rank % SCALE_BYTES or row_bytes % SCALE_BYTES or scale_end % item or row_bytes % item:
        raise ValueError(f"fp8_ds_mla rows of {row_bytes} B (rank {rank}, {dtype}): fields not aligned to their types")
    return (rows.view(E4M3), rows.view(torch.float32), rows.view(dtype),
            row_bytes, row_bytes // SCALE_BYTES, rank // SCALE_BYTES, row_bytes // item, scale_end // item)  # fmt: skip


def sparse_mla_fp8_triton(q, latent_rows, topk_slots, softmax_scale, kv_lora_rank, block_k=32, num_splits=None):
    """Triton: latent_rows uint8 [num_slots, row_bytes] (checked by the dispatcher)."""
    views = _views(latent_rows, kv_lora_rank, q.dtype)
    return launch_sparse_mla(q, views, topk_slots, softmax_scale, kv_lora_rank, True, block_k, num_splits)


def sparse_mla_fp8_torch(q, latent_rows, topk_slots, softmax_scale, kv_lora_rank):
    """Reference: dequantize each selected row (per query token and slot), then ``sparse_mla_torch``."""
    T, K = topk_slots.shape
    rows = dequantize_latent_rows(latent_rows, kv_lora_rank, q.dtype, topk_slots.reshape(-1).clamp_min(0))
    local = torch.arange(T * K, device=q.device).view(T, K)
    return sparse_mla_torch(q, rows, torch.where(topk_slots >= 0, local, -1), softmax_scale, kv_lora_rank)


def sparse_mla_fp8_attention(
    q: torch.Tensor,
    latent_rows: torch.Tensor,
    topk_slots: torch.Tensor,
    softmax_scale: float,
    kv_lora_rank: int,
    *,
    backend: str = "auto",
) -> tuple[torch.Tensor, torch.Tensor]:
    """(out [T, H, kv_lora_rank] in q's dtype, lse [T, H] fp32) over an FP8 latent cache.

    q [T, H, kv_lora_rank + rope] in the model dtype (the rope's dtype in the rows); latent_rows
    uint8 [num_pages, page_size, row_bytes] or [num_slots, row_bytes]; topk_slots [T, K] (-1 = masked).
    """
    dims = check_tensor("q", q, ["T", "H", "W"], FLOAT_DTYPES)
    check_tensor("topk_slots", topk_slots, ["T", "K"], INDEX_DTYPES, dims)
    if not 0 < kv_lora_rank < dims["W"]:
        raise ValueError(f"kv_lora_rank={kv_lora_rank}: expected 0 < kv_lora_rank < q.shape[-1] ({dims['W']})")
    rows = check_latent_rows(latent_rows, kv_lora_rank, dims["W"] - kv_lora_rank, q.dtype)
    device = check_same_device(q=q, latent_rows=latent_rows, topk_slots=topk_slots)
    impl = sparse_mla_fp8_triton if resolve_backend(backend, device) == "triton" else sparse_mla_fp8_torch
    return impl(q, rows, topk_slots, softmax_scale, kv_lora_rank)
