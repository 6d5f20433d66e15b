"""The FP8 KV-cache byte layouts as the kernels read them, and their torch dequantization.

Mirrors inference/kv_formats.py (which writes them; kernels must not import inference):

- ``fp8_ds_mla`` latent row, one per slot: kv_lora_rank e4m3 bytes | one fp32 scale per 128
  latent values | the rope key in the model dtype (656 B at GLM-5 widths with bf16 rope).
- FP8 indexer keys, per page of ``page_size`` tokens: page_size x dim e4m3 bytes (token-major),
  then page_size x ceil(dim/128) fp32 scales (132 B per token at dim 128). The keys are stored
  Hadamard-rotated; the caller rotates its queries the same way, the kernels never see it.

A value is ``e4m3 * scale`` in fp32, rounded to the model dtype: the same arithmetic as
``kv_formats.dequantize_blocks``, so a kernel reading the bytes matches dequantize-then-compute.
"""

from __future__ import annotations

import torch

E4M3 = torch.float8_e4m3fn
SCALE_BLOCK = 128
SCALE_BYTES = 4


def num_scale_blocks(width: int) -> int:
    return -(-width // SCALE_BLOCK)


def latent_row_bytes(rank: int, rope: int, dtype: torch.dtype) -> int:
    return rank + SCALE_BYTES * num_scale_blocks(rank) + rope * dtype.itemsize


def indexer_page_bytes(page_size: int, dim: int) -> int:
    return page_size * (dim + SCALE_BYTES * num_scale_blocks(dim))


def _scaled(values: torch.Tensor, scales: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """uint8 e4m3 [n, W] x fp32 [n, blocks] -> [n, W] in dtype."""
    width = values.shape[-1]
    full = values.view(E4M3).float()
    per_value = scales.repeat_interleave(SCALE_BLOCK, dim=-1)[:, :width]
    return (full * per_value).to(dtype)


def dequantize_latent_rows(rows: torch.Tensor, rank: int, dtype: torch.dtype, slots: torch.Tensor) -> torch.Tensor:
    """rows: the latent cache as uint8 [num_slots, row_bytes]; slots [n] (>= 0) -> [n, rank + rope] in dtype."""
    raw = rows.index_select(0, slots.long())
    scale_end = rank + SCALE_BYTES * num_scale_blocks(rank)
    scales = raw[:, rank:scale_end].contiguous().view(torch.float32)
    rope = raw[:, scale_end:].contiguous().view(dtype)
    return torch.cat([_scaled(raw[:, :rank], scales, dtype), rope], dim=-1)


def dequantize_indexer_keys(
    pages: torch.Tensor, page_size: int, dim: int, dtype: torch.dtype, slots: torch.Tensor
) -> torch.Tensor:
    """pages: the indexer cache as uint8 [num_pages, page_bytes]; slots [n] (>= 0) -> keys [n, dim] in dtype."""
    blocks = num_scale_blocks(dim)
    page, offset = slots.long() // page_size, slots.long() % page_size
    values = pages[:, : page_size * dim].reshape(-1, page_size, dim)[page, offset]
    scales = pages[:, page_size * dim :].contiguous().view(torch.float32).view(-1, page_size, blocks)[page, offset]
    return _scaled(values, scales, dtype)


def check_latent_rows(rows: torch.Tensor, rank: int, rope: int, dtype: torch.dtype) -> torch.Tensor:
    """The latent cache as flat uint8 [num_slots, row_bytes], with a clear error when it is not one."""
    want = latent_row_bytes(rank, rope, dtype)
    if rows.dtype != torch.uint8 or rows.shape[-1] != want or not rows.is_contiguous():
        raise ValueError(
            f"latent_rows: {rows.dtype} {list(rows.shape)}, expected contiguous uint8 [..., {want}] "
            f"(fp8_ds_mla rows for rank {rank}, rope {rope} in {dtype})"
        )
    return rows.view(-1, want)


def check_indexer_pages(pages: torch.Tensor, page_size: int, dim: int) -> torch.Tensor:
    want = indexer_page_bytes(page_size, dim)
    if pages.dtype != torch.uint8 or pages.dim() != 2 or pages.shape[1] != want or not pages.is_contiguous():
        raise ValueError(
            f"key_pages: {pages.dtype} {list(pages.shape)}, expected contiguous uint8 [num_pages, {want}] "
            f"(FP8 indexer pages of {page_size} tokens x dim {dim})"
        )
    return pages
