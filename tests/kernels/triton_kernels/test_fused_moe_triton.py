"""Triton fused MoE vs the torch reference.

Tolerances: fp32 1e-4 (relative to the output scale); bf16 3e-2: the reference rounds gate/up to
bf16 before SwiGLU (grouped_mm output) while the kernel applies SwiGLU to fp32 accumulators."""

from __future__ import annotations

import pytest
import torch

from kernels.fused_moe import fused_moe, fused_moe_triton

CASES = {
    # name: (tokens, hidden, intermediate, experts, top_k)
    "odd_sizes": (7, 48, 40, 5, 3),
    "decode_one_token": (1, 32, 16, 8, 4),
    "wide_hidden_multi_block": (5, 80, 72, 3, 2),
}


def _inputs(case, dtype, gen, device):
    T, H, I, E, k = CASES[case]
    hidden = torch.randn(T, H, generator=gen).to(dtype)
    gate_up = (torch.randn(E, 2 * I, H, generator=gen) * H**-0.5).to(dtype)
    down = (torch.randn(E, H, I, generator=gen) * I**-0.5).to(dtype)
    ids = torch.stack([torch.randperm(E, generator=gen)[:k] for _ in range(T)])
    weights = torch.rand(T, k, generator=gen)
    return [x.to(device) for x in (hidden, gate_up, down, ids, weights)]


def _check(got, want, dtype):
    tol = 1e-4 if dtype == torch.float32 else 3e-2
    scale = want.float().abs().max().clamp(min=1.0)
    torch.testing.assert_close(got.float() / scale, want.float() / scale, atol=tol, rtol=tol)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("case", sorted(CASES))
def test_matches_reference(case, dtype, gen, device):
    args = _inputs(case, dtype, gen, device)
    got = fused_moe(*args, backend="triton")
    assert got.shape == args[0].shape and got.dtype == dtype
    _check(got, fused_moe(*args, backend="torch"), dtype)


def test_experts_of_other_ranks_are_skipped(gen, device):
    hidden, gate_up, down, ids, weights = _inputs("odd_sizes", torch.float32, gen, device)
    ids[0] = -1  # token 0 routes only to experts another rank owns
    ids[1, 0] = gate_up.shape[0]  # out of range counts as not local, too
    got = fused_moe(hidden, gate_up, down, ids, weights, backend="triton")
    assert torch.equal(got[0], torch.zeros_like(got[0]))
    _check(got, fused_moe(hidden, gate_up, down, ids, weights, backend="torch"), torch.float32)


def test_one_hot_expert_spans_several_blocks(gen, device):
    """20 tokens all routed to expert 2 with block_m=16: one expert's run over two M-blocks, the
    second partly padding, and every other expert empty."""
    hidden, gate_up, down, _, _ = _inputs("wide_hidden_multi_block", torch.float32, gen, device)
    hidden = torch.randn(20, hidden.shape[1], generator=gen).to(device)
    ids = torch.full((20, 1), 2, device=device)
    weights = torch.rand(20, 1, generator=gen).to(device)
    got = fused_moe_triton(hidden, gate_up, down, ids, weights, block_m=16, block_n=32, block_k=16)
    _check(got, fused_moe(hidden, gate_up, down, ids, weights, backend="torch"), torch.float32)
