"""The torch reference of expanded-form MLA prefill attention (kernels/mla_prefill.py) against a
plain per-token, per-head softmax over the visible (and selected) keys."""

from __future__ import annotations

import torch

from kernels.mla_prefill import mla_prefill_attention, selection_bits


def test_selection_bits_set_exactly_the_selected_positions():
    positions = torch.tensor([[0, 31, 32, 63, -1], [5, -1, -1, -1, -1], [-1, -1, -1, -1, -1]])
    bits = selection_bits(positions, 70)
    assert bits.shape == (3, 3) and bits.dtype == torch.int32
    unpacked = ((bits.long()[:, torch.arange(70) // 32] >> (torch.arange(70) % 32)) & 1).bool()
    want = torch.zeros(3, 70, dtype=torch.bool)
    want[0, [0, 31, 32, 63]] = True
    want[1, 5] = True
    assert torch.equal(unpacked, want)


def test_matches_per_token_softmax_over_visible_selected_keys():
    gen = torch.Generator().manual_seed(0)
    H, nope, rope, v = 3, 8, 4, 6
    lens = [7, 12]  # sequence 1 starts at row 7 of the packed keys
    key_start = torch.tensor([0, 7])
    kv = torch.randn(sum(lens), H, nope + v, generator=gen)
    k_pe = torch.randn(sum(lens), rope, generator=gen)
    query_seq = torch.tensor([0, 0, 1, 1, 1])
    query_pos = torch.tensor([5, 6, 9, 10, 11])
    q = torch.randn(5, H, nope + rope, generator=gen)
    positions = torch.tensor([[0, 2, 5, -1], [1, 3, -1, -1], [0, 9, 4, 8], [-1, -1, -1, -1], [11, 0, -1, -1]])
    for sel in (None, positions):
        bits = None if sel is None else selection_bits(sel, 12)
        out = mla_prefill_attention(q, kv, k_pe, key_start, query_seq, query_pos, 0.4, nope, bits, backend="torch")
        for t in range(5):
            b, p = int(query_seq[t]), int(query_pos[t])
            keep = list(range(p + 1)) if sel is None else [int(x) for x in sel[t] if x >= 0]
            if not keep:  # a token with no selected key gets zeros
                assert torch.equal(out[t], torch.zeros(H, v))
                continue
            rows = kv[int(key_start[b]) + torch.tensor(keep)]
            for h in range(H):
                k = torch.cat([rows[:, h, :nope], k_pe[int(key_start[b]) + torch.tensor(keep)]], dim=-1)
                probs = torch.softmax(q[t, h] @ k.T * 0.4, dim=-1)
                torch.testing.assert_close(out[t, h], probs @ rows[:, h, nope:], atol=1e-5, rtol=1e-5)
