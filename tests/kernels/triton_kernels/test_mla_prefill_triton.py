"""Triton expanded-form MLA prefill attention vs the torch reference (kernels/mla_prefill.py).

Tolerances: fp32 1e-4; bf16 2e-2 (both accumulate in fp32; the bf16 probabilities fed to the
second dot and the bf16 output rounding dominate)."""

from __future__ import annotations

import pytest
import torch

from kernels.mla_prefill import mla_prefill_attention, selection_bits

CASES = {
    # name: (heads, nope, rope, v, [(cached, new) per sequence])
    "odd_dims_two_seqs": (3, 16, 8, 16, [(0, 37), (20, 70)]),
    "glm5_head_widths": (2, 192, 64, 256, [(5, 40)]),
    "one_token_tiles": (2, 32, 16, 32, [(30, 1), (0, 1), (9, 2)]),
}


def _inputs(case, dtype, gen, device):
    H, nope, rope, v, seqs = CASES[case]
    lens = [c + n for c, n in seqs]
    starts = torch.tensor([0, *lens[:-1]]).cumsum(0)
    kv = torch.randn(sum(lens), H, nope + v, generator=gen).to(dtype)
    # k_pe as a strided view of a wider row, the way the model passes the gathered latent rows
    k_pe = torch.randn(sum(lens), 40 + rope, generator=gen).to(dtype)[:, 40:]
    query_seq = torch.tensor([b for b, (_, n) in enumerate(seqs) for _ in range(n)])
    query_pos = torch.tensor([c + i for c, n in seqs for i in range(n)])
    q = torch.randn(query_seq.numel(), H, nope + rope, generator=gen).to(dtype)
    args = (q, kv, k_pe, starts.to(torch.int32), query_seq.to(torch.int32), query_pos.to(torch.int32))
    return tuple(a.to(device) for a in args), nope, (nope + rope) ** -0.5


def _random_selection(query_pos, k, gen):
    """k random visible positions per token (fewer where fewer are visible), -1 padded."""
    rows = []
    for p in query_pos.tolist():
        chosen = torch.randperm(p + 1, generator=gen)[:k]
        rows.append(torch.cat([chosen, torch.full((k - chosen.numel(),), -1)]))
    return torch.stack(rows)


# GLM widths in fp32 compile for half a minute on a GPU (fp32 dots without tensor cores) and serve nothing.
PAIRS = [(case, dtype) for case in sorted(CASES) for dtype in (torch.float32, torch.bfloat16)
         if (case, dtype) != ("glm5_head_widths", torch.float32)]  # fmt: skip


@pytest.mark.parametrize("case,dtype", PAIRS)
def test_matches_reference_causal(case, dtype, gen, device):
    args, nope, scale = _inputs(case, dtype, gen, device)
    out = mla_prefill_attention(*args, scale, nope, backend="triton")
    ref = mla_prefill_attention(*args, scale, nope, backend="torch")
    assert out.shape == ref.shape and out.dtype == dtype
    tol = 1e-4 if dtype == torch.float32 else 2e-2
    torch.testing.assert_close(out.float(), ref.float(), atol=tol, rtol=tol)


@pytest.mark.parametrize("case,dtype", [("odd_dims_two_seqs", torch.float32), ("glm5_head_widths", torch.bfloat16)])
def test_matches_reference_with_a_selection(case, dtype, gen, device):
    """Each query attends only its selected keys (a DSA top-k), one token selects nothing."""
    args, nope, scale = _inputs(case, dtype, gen, device)
    positions = _random_selection(args[5].cpu(), 9, gen)
    positions[3] = -1
    bits = selection_bits(positions, int(args[5].max()) + 1).to(device)
    out = mla_prefill_attention(*args, scale, nope, bits, backend="triton").float()
    ref = mla_prefill_attention(*args, scale, nope, bits, backend="torch").float()
    tol = 1e-4 if dtype == torch.float32 else 2e-2
    torch.testing.assert_close(out, ref, atol=tol, rtol=tol)
    assert torch.equal(out[3], torch.zeros_like(out[3]))
    causal = mla_prefill_attention(*args, scale, nope, backend="torch").float()
    assert not torch.allclose(out, causal, atol=0.1)  # the selection really restricted the keys
