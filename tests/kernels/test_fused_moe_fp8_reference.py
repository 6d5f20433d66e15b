"""FP8 fused MoE torch reference vs a per-(token, expert) formula, and its distance from bf16."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from inference.fp8 import dequantize_blockwise, quantize_blockwise
from kernels.fp8_gemm import act_dequant_torch, act_quant_torch
from kernels.fused_moe import fused_moe
from kernels.fused_moe_fp8 import fused_moe_fp8

T, H, I, E, K, BLOCK = 6, 32, 16, 4, 2, (8, 8)


def _setup():
    gen = torch.Generator().manual_seed(3)
    gu = [quantize_blockwise(torch.randn(2 * I, H, generator=gen) * H**-0.5, BLOCK) for _ in range(E)]
    dn = [quantize_blockwise(torch.randn(H, I, generator=gen) * I**-0.5, BLOCK) for _ in range(E)]
    hidden = torch.randn(T, H, generator=gen)
    ids = torch.stack([torch.randperm(E, generator=gen)[:K] for _ in range(T)])
    ids[2, 1] = -1  # foreign expert (expert parallelism)
    weights = torch.rand(T, K, generator=gen)
    stacks = [torch.stack([t[i] for t in gu]) for i in (0, 1)] + [torch.stack([t[i] for t in dn]) for i in (0, 1)]
    return hidden, stacks, ids, weights


def test_reference_is_the_per_pair_formula():
    hidden, (guq, gus, dq, ds), ids, weights = _setup()
    got = fused_moe_fp8(hidden, guq, gus, dq, ds, ids, weights, BLOCK, backend="torch")
    x = act_dequant_torch(*act_quant_torch(hidden, BLOCK[1]), BLOCK[1]).double()
    want = torch.zeros(T, H, dtype=torch.float64)
    for t in range(T):
        for j in range(K):
            e = int(ids[t, j])
            if e < 0:
                continue
            gu = x[t] @ dequantize_blockwise(guq[e], gus[e], BLOCK, torch.float64).T
            act = (F.silu(gu[:I]) * gu[I:]).float()
            a = act_dequant_torch(*act_quant_torch(act[None], BLOCK[1]), BLOCK[1])[0].double()
            want[t] += weights[t, j].double() * (a @ dequantize_blockwise(dq[e], ds[e], BLOCK, torch.float64).T)
    assert ((got.double() - want).abs().max() / want.abs().max()).item() < 1e-5


def test_w8a8_error_against_bf16_experts_is_activation_rounding():
    hidden, (guq, gus, dq, ds), ids, weights = _setup()
    got = fused_moe_fp8(hidden, guq, gus, dq, ds, ids, weights, BLOCK, backend="torch")
    gu = torch.stack([dequantize_blockwise(guq[e], gus[e], BLOCK) for e in range(E)])
    dn = torch.stack([dequantize_blockwise(dq[e], ds[e], BLOCK) for e in range(E)])
    w16 = fused_moe(hidden, gu, dn, ids, weights, backend="torch")
    rel = ((got - w16).abs().max() / w16.abs().max()).item()
    assert 0 < rel < 0.1, rel  # e4m3 has 3 mantissa bits: a few percent, never exact


def test_intermediate_not_a_multiple_of_the_row_block_is_refused():
    hidden, (guq, gus, dq, ds), ids, weights = _setup()
    with pytest.raises(ValueError, match="multiple of the 32-row block"):
        fused_moe_fp8(hidden, guq, gus, dq, ds, ids, weights, (32, 8), backend="torch")
