"""Triton FP8 kernels (act_quant, block-scaled W8A8 GEMM, weight_dequant) vs their torch references.

act_quant and weight_dequant are exact (bitwise). The GEMM accumulates per K block with the scales
applied per block, the reference dequantizes first and runs one fp32 matmul: both are the same
exact products summed in different orders, so fp32 outputs agree to ~1e-6 relative."""

from __future__ import annotations

import pytest
import torch

from inference.fp8 import quantize_blockwise
from kernels.fp8_gemm import act_quant, fp8_gemm, w8a8_linear, weight_dequant

# name: (M, N, K, block)
GEMM_CASES = {
    "decode_row_partial_n": (1, 40, 64, (16, 16)),  # 40 rows: a partial last N block
    "prefill_multi_m_block": (70, 48, 96, (16, 32)),
    "block_n_wider_than_tile": (5, 36, 32, (32, 16)),
    "kv_a_576_rows_128_blocks": (2, 576, 256, (128, 128)),  # GLM's kv_a: 4.5 row blocks
}


def _rel(a, b):
    return ((a.float() - b.float()).abs().max() / b.float().abs().max().clamp(min=1e-30)).item()


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_act_quant_bitwise(dtype, gen, device):
    x = (torch.randn(19, 64, generator=gen) * torch.logspace(-8, 3, 64, base=2)).to(dtype)
    x[3] = 0.0
    x[4, :16] = -0.0
    x = x.to(device)
    q, s = act_quant(x, 16, backend="triton")
    q_ref, s_ref = act_quant(x, 16, backend="torch")
    assert torch.equal(s, s_ref)
    assert torch.equal(q.view(torch.uint8), q_ref.view(torch.uint8))


@pytest.mark.parametrize("case", sorted(GEMM_CASES))
def test_block_gemm_matches_reference(case, gen, device):
    m, n, k, block = GEMM_CASES[case]
    wq, ws = quantize_blockwise(torch.randn(n, k, generator=gen) / k**0.5, block)
    x = torch.randn(m, k, generator=gen)
    wq, ws, x = wq.to(device), ws.to(device), x.to(device)
    xq, xs = act_quant(x, block[1], backend="torch")
    got = fp8_gemm(xq, xs, wq, ws, block, torch.float32, backend="triton")
    want = fp8_gemm(xq, xs, wq, ws, block, torch.float32, backend="torch")
    assert got.shape == (m, n)
    assert _rel(got, want) < 1e-5
    got16 = w8a8_linear(x.bfloat16(), wq, ws, block, backend="triton")
    want16 = w8a8_linear(x.bfloat16(), wq, ws, block, backend="torch")
    assert got16.dtype == torch.bfloat16 and _rel(got16, want16) < 1e-2


def test_weight_dequant_bitwise(gen, device):
    wq, ws = quantize_blockwise(torch.randn(40, 48, generator=gen), (16, 32))  # partial blocks both ways
    wq, ws = wq.to(device), ws.to(device)
    got = weight_dequant(wq, ws, (16, 32), torch.float32, backend="triton")
    assert torch.equal(got, weight_dequant(wq, ws, (16, 32), torch.float32, backend="torch"))
    # bf16: the same fp32 product, then one rounding (Triton's interpreter truncates where the GPU
    # and torch round to nearest, so one bf16 step apart on CPU)
    got = weight_dequant(wq, ws, (16, 32), torch.bfloat16, backend="triton")
    want = weight_dequant(wq, ws, (16, 32), torch.bfloat16, backend="torch")
    torch.testing.assert_close(got.float(), want.float(), rtol=2**-7, atol=0)


def test_triton_refuses_blocks_too_small_for_a_dot_tile(gen, device):
    wq, ws = quantize_blockwise(torch.randn(16, 16, generator=gen), (8, 8))
    xq, xs = act_quant(torch.randn(2, 16, generator=gen), 8, backend="torch")
    with pytest.raises(ValueError, match="K block 8 must be a power of two >= 16"):
        fp8_gemm(xq.to(device), xs.to(device), wq.to(device), ws.to(device), (8, 8), backend="triton")
