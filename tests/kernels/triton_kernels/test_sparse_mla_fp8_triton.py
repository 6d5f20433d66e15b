"""Sparse MLA reading fp8_ds_mla rows in place vs dequantize-then-attend (kernels/sparse_mla_fp8.py).

The rows are written by kv_formats' own quantizer. Tolerances: fp32 1e-4 (the same dequantized
values, summation order aside); bf16 3e-2 (bf16 rounding of the dequantized latent and the
output, plus the interpreter's truncating fp32 -> bf16 cast; compiled kernels round to nearest).
Against attention over the unquantized rows the error is the FP8 error itself (checked below)."""

from __future__ import annotations

import pytest
import torch

from inference.kv_formats import Fp8LatentRows, latent_row_bytes
from kernels.sparse_mla import sparse_mla_attention
from kernels.sparse_mla_fp8 import sparse_mla_fp8_attention, sparse_mla_fp8_triton

CASES = {  # name: (tokens, heads, kv_lora_rank, rope_dim, selected K, num_slots)
    "decode_odd_heads_and_k": (4, 5, 128, 16, 45, 96),
    "two_head_blocks": (3, 20, 256, 64, 40, 96),
    "glm5_row_width": (2, 16, 512, 64, 32, 64),
}


def _inputs(case, dtype, gen, device):
    T, H, R, P, K, n = CASES[case]
    storage = torch.zeros(n // 8, 8, latent_row_bytes(R, P, dtype), dtype=torch.uint8)
    rows = Fp8LatentRows(storage, R, P, dtype)
    original = torch.randn(n, R + P, generator=gen)
    rows.write(torch.arange(n), original.to(dtype))
    q = torch.randn(T, H, R + P, generator=gen).to(dtype)
    slots = torch.randint(0, n, (T, K), generator=gen, dtype=torch.int32)
    slots[0, K // 3 :] = -1
    slots[-1, ::2] = -1
    return q.to(device), storage.to(device), slots.to(device), (R + P) ** -0.5, R, rows, original.to(device)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("case", sorted(CASES))
def test_matches_dequantize_then_attend(case, dtype, gen, device):
    q, storage, slots, scale, rank, rows, original = _inputs(case, dtype, gen, device)
    out, lse = sparse_mla_fp8_attention(q, storage, slots, scale, rank, backend="triton")
    ref_out, ref_lse = sparse_mla_fp8_attention(q, storage, slots, scale, rank, backend="torch")
    # The reference itself is kv_formats' dequantization followed by the model-dtype kernel reference.
    dense = rows.gather(torch.arange(storage.shape[0] * 8)).to(device)
    again, _ = sparse_mla_attention(q, dense, slots, scale, rank, backend="torch")
    assert torch.equal(again, ref_out)
    tol = 1e-4 if dtype == torch.float32 else 3e-2
    assert out.shape == ref_out.shape and out.dtype == q.dtype
    torch.testing.assert_close(out.float(), ref_out.float(), atol=tol, rtol=tol)
    torch.testing.assert_close(lse, ref_lse, atol=tol, rtol=tol)
    # Within FP8 error of attention over the rows before quantization (e4m3: 2^-4 relative per value).
    exact, _ = sparse_mla_attention(q.float(), original, slots, scale, rank, backend="torch")
    assert (out.float() - exact).abs().max() < 0.1 * exact.abs().max()


@pytest.mark.parametrize("num_splits", [1, 3])
def test_splits_and_fully_masked_tokens(num_splits, gen, device):
    q, storage, slots, scale, rank, *_ = _inputs("two_head_blocks", torch.float32, gen, device)
    slots[1] = -1
    flat = storage.view(-1, storage.shape[-1])
    out, lse = sparse_mla_fp8_triton(q, flat, slots, scale, rank, num_splits=num_splits)
    ref_out, ref_lse = sparse_mla_fp8_attention(q, storage, slots, scale, rank, backend="torch")
    torch.testing.assert_close(out, ref_out, atol=1e-4, rtol=1e-4)
    assert torch.equal(out[1], torch.zeros_like(out[1])) and torch.isneginf(lse[1]).all()


def test_rejects_a_cache_that_is_not_fp8_ds_mla(gen, device):
    q, storage, slots, scale, rank, *_ = _inputs("decode_odd_heads_and_k", torch.float32, gen, device)
    with pytest.raises(ValueError, match="latent_rows"):
        sparse_mla_fp8_attention(q, storage[..., :-4].contiguous(), slots, scale, rank, backend="triton")
