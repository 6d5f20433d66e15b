"""Triton indexer scoring vs the torch reference (tolerances: fp32 1e-4, bf16 inputs 2e-3 relative:
both upcast the bf16 inputs and accumulate in fp32, so only summation order differs)."""

from __future__ import annotations

import pytest
import torch

from kernels.indexer_topk import indexer_scores, indexer_scores_triton, indexer_topk

CASES = {
    # name: (seq_lens, query_lens, page_size, heads, head_dim)
    "decode": ([1, 37, 70], [1, 1, 1], 16, 4, 32),
    "prefill_chunks_odd_dims": ([20, 45], [5, 5], 8, 20, 48),
    "mtp_verify": ([33, 9], [3, 3], 4, 16, 64),
    "glm5_heads_and_dim": ([70], [2], 64, 32, 128),
}


def _inputs(case, dtype, gen, device, make_paged_batch):
    seq_lens, query_lens, page_size, H, D = CASES[case]
    batch = make_paged_batch(seq_lens, query_lens, page_size, gen)
    T = int(batch.query_seq.numel())
    keys = torch.randn(batch.num_slots // page_size, page_size, D, generator=gen).to(dtype)
    q = torch.randn(T, H, D, generator=gen).to(dtype)
    w = torch.randn(T, H, generator=gen) * H**-0.5
    args = (q, w, keys, batch.key_slots, batch.query_seq, batch.query_pos)
    return tuple(a.to(device) for a in args), D**-0.5


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("case", sorted(CASES))
def test_scores_match_reference(case, dtype, gen, device, make_paged_batch):
    args, scale = _inputs(case, dtype, gen, device, make_paged_batch)
    got = indexer_scores(*args, scale, backend="triton")
    want = indexer_scores(*args, scale, backend="torch")
    assert torch.equal(torch.isinf(got), torch.isinf(want)), "masked (-inf) positions differ"
    finite = torch.isfinite(want)
    tol = 1e-4 if dtype == torch.float32 else 2e-3
    torch.testing.assert_close(got[finite], want[finite], atol=tol, rtol=tol)
    # Causality: nothing past the query position, everything up to it (all slots are live here).
    q_pos = args[5].long()
    key_pos = torch.arange(want.shape[1], device=device)
    assert torch.equal(finite, key_pos[None, :] <= q_pos[:, None])


@pytest.mark.parametrize("topk", [1, 8, 1000])
def test_topk_selects_the_best_visible_keys(topk, gen, device, make_paged_batch):
    args, scale = _inputs("decode", torch.float32, gen, device, make_paged_batch)
    got = indexer_topk(*args, topk, scale, backend="triton")
    want = indexer_topk(*args, topk, scale, backend="torch")
    ref_scores = indexer_scores(*args, scale, backend="torch")
    S = ref_scores.shape[1]
    assert got.positions.shape == (args[0].shape[0], min(topk, S))
    # The same number of valid entries per row, and the same selected score multiset (ties aside).
    assert torch.equal((got.positions >= 0).sum(1), (want.positions >= 0).sum(1))
    for row in range(ref_scores.shape[0]):
        sel_got = got.positions[row][got.positions[row] >= 0].long()
        sel_want = want.positions[row][want.positions[row] >= 0].long()
        torch.testing.assert_close(
            ref_scores[row, sel_got].sort().values, ref_scores[row, sel_want].sort().values, atol=1e-5, rtol=1e-5
        )
        # Slots are the cache slots of the selected positions.
        seq = args[4][row].long()
        assert torch.equal(got.slots[row][got.positions[row] >= 0].long(), args[3][seq, sel_got].long())
    assert torch.all((got.positions < 0) == (got.slots < 0))


def test_holes_in_key_slots_are_never_selected(gen, device, make_paged_batch):
    args, scale = _inputs("prefill_chunks_odd_dims", torch.float32, gen, device, make_paged_batch)
    key_slots = args[3].clone()
    key_slots[0, 3:7] = -1  # e.g. evicted keys
    args = (*args[:3], key_slots, *args[4:])
    got = indexer_scores(*args, scale, backend="triton")
    want = indexer_scores(*args, scale, backend="torch")
    assert torch.equal(torch.isinf(got), torch.isinf(want))
    seq0 = args[4] == 0
    assert torch.isinf(got[seq0][:, 3:7]).all()
    top = indexer_topk(*args, 64, scale, backend="triton")
    assert not torch.isin(top.positions[seq0], torch.arange(3, 7, device=device)).any()


def test_chunked_queries_equal_one_pass(gen, device, make_paged_batch):
    args, scale = _inputs("prefill_chunks_odd_dims", torch.float32, gen, device, make_paged_batch)
    whole = indexer_topk(*args, 16, scale, backend="triton")
    # A tiny budget forces one query token per chunk.
    chunked = indexer_topk(*args, 16, scale, backend="triton", max_chunk_elems=1)
    assert torch.equal(whole.positions, chunked.positions)
    assert torch.equal(whole.slots, chunked.slots)


@pytest.mark.parametrize("block_t", [1, 2, 4])
@pytest.mark.parametrize("case", ["prefill_chunks_odd_dims", "mtp_verify"])
def test_token_blocks_of_any_size_agree(case, block_t, gen, device, make_paged_batch):
    """Several query tokens of one sequence share each key block; partial token blocks are padding."""
    args, scale = _inputs(case, torch.float32, gen, device, make_paged_batch)
    perm = torch.randperm(args[0].shape[0], generator=gen).to(device)  # tokens need not arrive grouped
    args = tuple(a[perm] if i in (0, 1, 4, 5) else a for i, a in enumerate(args))
    got = indexer_scores_triton(*args, scale, block_t=block_t)
    want = indexer_scores(*args, scale, backend="torch")
    assert torch.equal(torch.isinf(got), torch.isinf(want))
    finite = torch.isfinite(want)
    torch.testing.assert_close(got[finite], want[finite], atol=1e-4, rtol=1e-4)
