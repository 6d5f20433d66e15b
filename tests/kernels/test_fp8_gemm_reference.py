"""The FP8 GEMM's torch references against direct formulas (CPU, no Triton)."""

from __future__ import annotations

import pytest
import torch

from kernels.fp8_gemm import (
    AMAX_FLOOR,
    act_dequant_torch,
    act_quant,
    fp8_gemm,
    w8a8_linear,
    weight_dequant,
)
from inference.fp8 import dequantize_blockwise, quantize_blockwise


def _gen():
    return torch.Generator().manual_seed(7)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_act_quant_is_the_direct_formula_bit_for_bit(dtype):
    x = (torch.randn(5, 3, 256, generator=_gen()) * torch.logspace(-6, 2, 256)).to(dtype)
    x[0, 0, :128] = 0.0  # an all-zero group: amax clamps, every value quantizes to 0
    q, s = act_quant(x, 128, backend="torch")
    assert q.dtype == torch.float8_e4m3fn and q.shape == x.shape and s.shape == (5, 3, 2)
    for m in range(5):
        for r in range(3):
            for g in range(2):
                xs = x[m, r, g * 128 : (g + 1) * 128].float()
                scale = xs.abs().max().clamp_min(AMAX_FLOOR) / 448.0
                want = (xs / scale).clamp(-448, 448).to(torch.float8_e4m3fn)
                assert torch.equal(s[m, r, g], scale)
                assert torch.equal(q[m, r, g * 128 : (g + 1) * 128].view(torch.uint8), want.view(torch.uint8))
    # round trip within half an e4m3 step (3 mantissa bits -> rel 2^-4) of each group's amax scale
    back = act_dequant_torch(q, s, 128)
    err = (back - x.float()).abs().unflatten(-1, (2, 128)).amax(-1)
    assert (err <= s * 448 * 2**-4 + 1e-12).all()


def test_block_gemm_reference_equals_fp64_dequantized_matmul():
    # N=576 rows: the kv_a projection's partial last 128-row block
    gen = _gen()
    x = torch.randn(9, 512, generator=gen)
    w = torch.randn(576, 512, generator=gen) / 512**0.5
    wq, ws = quantize_blockwise(w, (128, 128))
    xq, xs = act_quant(x, 128, backend="torch")
    got = fp8_gemm(xq, xs, wq, ws, (128, 128), torch.float32, backend="torch")
    want = act_dequant_torch(xq, xs, 128).double() @ dequantize_blockwise(wq, ws, (128, 128), torch.float64).T
    rel = ((got.double() - want).abs().max() / want.abs().max()).item()
    assert rel < 1e-6, rel
    # w8a8_linear is the same two steps; against the unquantized activations the error is
    # activation rounding only (e4m3: a few percent per element, much less on a sum).
    assert torch.equal(w8a8_linear(x, wq, ws, (128, 128), backend="torch"), got)
    w16 = x @ dequantize_blockwise(wq, ws, (128, 128)).T
    assert ((got - w16).abs().max() / w16.abs().max()).item() < 3e-2


def test_weight_dequant_matches_the_loader_dequantization():
    w = torch.randn(200, 136, generator=_gen())
    wq, ws = quantize_blockwise(w, (64, 32))
    for dtype in (torch.float32, torch.bfloat16):
        assert torch.equal(weight_dequant(wq, ws, (64, 32), dtype, backend="torch"), dequantize_blockwise(wq, ws, (64, 32), dtype))


def test_k_not_a_multiple_of_the_block_is_a_clear_error():
    with pytest.raises(ValueError, match=r"K=130 is not a multiple of the FP8 quantization block 128"):
        act_quant(torch.randn(2, 130), 128, backend="torch")
    wq, ws = quantize_blockwise(torch.randn(64, 130), (128, 128))
    xq = torch.zeros(2, 130, dtype=torch.float8_e4m3fn)
    with pytest.raises(ValueError, match=r"K=130 is not a multiple"):
        fp8_gemm(xq, torch.ones(2, 1), wq, ws, (128, 128), backend="torch")


def test_wrong_scale_shape_names_the_argument():
    wq, _ = quantize_blockwise(torch.randn(256, 256), (128, 128))
    with pytest.raises(ValueError, match=r"ws: shape \[2, 3\], expected \[2, 2\]"):
        weight_dequant(wq, torch.ones(2, 3), (128, 128), backend="torch")
