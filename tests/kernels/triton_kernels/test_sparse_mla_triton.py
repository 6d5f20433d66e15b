"""Triton sparse MLA vs the torch reference.

Tolerances: fp32 1e-4; bf16 1e-2 (the kernel and the reference both accumulate in fp32; the bf16
output rounding, 2^-8 relative, dominates)."""

from __future__ import annotations

import pytest
import torch

from kernels.indexer_topk import indexer_topk
from kernels.sparse_mla import sparse_mla_attention, sparse_mla_triton

CASES = {
    # name: (tokens, heads, kv_lora_rank, rope_dim, selected K, num_slots)
    "decode_odd_heads_and_k": (4, 5, 64, 16, 45, 96),
    "many_heads_one_block": (2, 16, 32, 16, 32, 40),
    "two_head_blocks": (3, 20, 128, 64, 70, 200),
    "glm5_row_width": (2, 16, 512, 64, 64, 128),
}


def _inputs(case, dtype, gen, device):
    T, H, R, P, K, num_slots = CASES[case]
    cache = torch.randn(num_slots // 8, 8, R + P, generator=gen).to(dtype)
    q = torch.randn(T, H, R + P, generator=gen).to(dtype)
    slots = torch.randint(0, num_slots // 8 * 8, (T, K), generator=gen, dtype=torch.int32)
    slots[0, K // 3 :] = -1  # a ragged row: only the first third selected
    if T > 2:
        slots[2, ::2] = -1  # holes scattered through a row
    return q.to(device), cache.to(device), slots.to(device), (R + P) ** -0.5, R


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("case", sorted(CASES))
def test_matches_reference(case, dtype, gen, device):
    q, cache, slots, scale, rank = _inputs(case, dtype, gen, device)
    out, lse = sparse_mla_attention(q, cache, slots, scale, rank, backend="triton")
    ref_out, ref_lse = sparse_mla_attention(q, cache, slots, scale, rank, backend="torch")
    assert out.shape == (q.shape[0], q.shape[1], rank) and out.dtype == q.dtype
    tol = 1e-4 if dtype == torch.float32 else 1e-2
    torch.testing.assert_close(out.float(), ref_out.float(), atol=tol, rtol=tol)
    torch.testing.assert_close(lse, ref_lse, atol=1e-4, rtol=1e-4)


def test_fully_masked_token_gives_zeros(gen, device):
    q, cache, slots, scale, rank = _inputs("decode_odd_heads_and_k", torch.float32, gen, device)
    slots[1] = -1
    out, lse = sparse_mla_attention(q, cache, slots, scale, rank, backend="triton")
    assert torch.equal(out[1], torch.zeros_like(out[1]))
    assert torch.isneginf(lse[1]).all()
    assert torch.isfinite(out).all()


def test_flat_and_paged_cache_agree(gen, device):
    q, cache, slots, scale, rank = _inputs("many_heads_one_block", torch.float32, gen, device)
    paged, _ = sparse_mla_attention(q, cache, slots, scale, rank, backend="triton")
    flat, _ = sparse_mla_attention(q, cache.view(-1, cache.shape[-1]), slots, scale, rank, backend="triton")
    assert torch.equal(paged, flat)


def test_indexer_selection_feeds_sparse_attention(gen, device, make_paged_batch):
    """The indexer's slots drive the attention: equal to dense attention restricted to the top-k."""
    batch = make_paged_batch([30, 13], [2, 1], 4, gen)
    T, H, R, P, topk = batch.query_seq.numel(), 3, 32, 16, 8
    idx_keys = torch.randn(batch.num_slots, 32, generator=gen).to(device)
    latent = torch.randn(batch.num_slots, R + P, generator=gen).to(device)
    qi = torch.randn(T, 4, 32, generator=gen).to(device)
    w = torch.rand(T, 4, generator=gen).to(device)
    key_slots, qseq, qpos = batch.key_slots.to(device), batch.query_seq.to(device), batch.query_pos.to(device)
    sel = indexer_topk(qi, w, idx_keys, key_slots, qseq, qpos, topk, 32**-0.5, backend="triton")
    q = torch.randn(T, H, R + P, generator=gen).to(device)
    out, _ = sparse_mla_attention(q, latent, sel.slots, (R + P) ** -0.5, R, backend="triton")
    for t in range(T):  # dense masked attention over the sequence, keeping only the selected positions
        seq_slots = key_slots[qseq[t].long()].long()
        keep = torch.zeros(seq_slots.shape[0], dtype=torch.bool, device=device)
        keep[sel.positions[t][sel.positions[t] >= 0].long()] = True
        rows = latent[seq_slots.clamp(min=0)]
        scores = (q[t] @ rows.T) * (R + P) ** -0.5
        probs = torch.softmax(scores.masked_fill(~keep, float("-inf")), dim=-1)
        torch.testing.assert_close(out[t], probs @ rows[:, :R], atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("num_splits", [2, 3, 8])
def test_split_rows_merge_to_the_same_result(num_splits, gen, device):
    """Partial softmaxes over splits of the selected rows (some splits fully masked) merge exactly."""
    q, cache, slots, scale, rank = _inputs("two_head_blocks", torch.float32, gen, device)
    slots[1] = -1  # a token with no keys at all
    out, lse = sparse_mla_triton(q, cache, slots, scale, rank, num_splits=num_splits)
    ref_out, ref_lse = sparse_mla_attention(q, cache, slots, scale, rank, backend="torch")
    torch.testing.assert_close(out, ref_out, atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(lse, ref_lse, atol=1e-4, rtol=1e-4)
    assert torch.equal(out[1], torch.zeros_like(out[1]))
