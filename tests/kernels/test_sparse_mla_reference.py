"""The torch sparse-MLA reference against plain per-token softmax attention."""

from __future__ import annotations

import torch

from kernels.sparse_mla import sparse_mla_attention


def test_matches_dense_attention_over_the_selected_rows():
    gen = torch.Generator().manual_seed(0)
    T, H, R, P, K = 3, 4, 16, 8, 10
    cache = torch.randn(6, 4, R + P, generator=gen)
    q = torch.randn(T, H, R + P, generator=gen)
    slots = torch.randint(0, 24, (T, K), generator=gen, dtype=torch.int32)
    slots[1, 4:] = -1
    out, lse = sparse_mla_attention(q, cache, slots, 0.3, R, backend="torch")
    rows = cache.view(-1, R + P)
    for t in range(T):
        sel = rows[slots[t][slots[t] >= 0].long()]
        scores = q[t] @ sel.T * 0.3  # [H, k]
        torch.testing.assert_close(out[t], torch.softmax(scores, -1) @ sel[:, :R], atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(lse[t], torch.logsumexp(scores, -1), atol=1e-5, rtol=1e-5)


def test_duplicate_slots_count_twice_and_masked_rows_are_zero():
    cache = torch.randn(8, 6)
    q = torch.randn(2, 1, 6)
    slots = torch.tensor([[3, 3, 5], [-1, -1, -1]], dtype=torch.int32)
    out, lse = sparse_mla_attention(q, cache, slots, 1.0, 4, backend="torch")
    s3, s5 = float(q[0, 0] @ cache[3]), float(q[0, 0] @ cache[5])
    w3 = 2 * torch.exp(torch.tensor(s3)) / (2 * torch.exp(torch.tensor(s3)) + torch.exp(torch.tensor(s5)))
    torch.testing.assert_close(out[0, 0], w3 * cache[3, :4] + (1 - w3) * cache[5, :4], atol=1e-5, rtol=1e-5)
    assert torch.equal(out[1], torch.zeros(1, 4)) and torch.isneginf(lse[1]).all()
