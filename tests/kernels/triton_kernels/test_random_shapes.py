"""Random small shapes (hypothesis) for every Triton kernel against its reference, fp32 (1e-4).

Covers what the hand-picked cases might miss: odd head counts and widths, ragged sequences,
random -1 holes, more or fewer selected rows than a block, experts with no tokens."""

from __future__ import annotations

import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from kernels.fused_moe import fused_moe
from kernels.indexer_topk import indexer_scores
from kernels.sparse_mla import sparse_mla_attention, sparse_mla_triton

SETTINGS = settings(max_examples=8, deadline=None, derandomize=True, database=None)


@SETTINGS
@given(
    seqs=st.lists(st.tuples(st.integers(1, 40), st.integers(1, 3)), min_size=1, max_size=3),
    heads=st.integers(1, 20),
    dim=st.sampled_from([16, 24, 64]),
    page_size=st.sampled_from([1, 4, 16]),
    seed=st.integers(0, 2**16),
)
def test_indexer_scores(seqs, heads, dim, page_size, seed, device, make_paged_batch):
    gen = torch.Generator().manual_seed(seed)
    seq_lens = [n for n, _ in seqs]
    query_lens = [min(q, n) for n, q in seqs]
    batch = make_paged_batch(seq_lens, query_lens, page_size, gen)
    key_slots = batch.key_slots.clone()
    key_slots[torch.rand(key_slots.shape, generator=gen) < 0.1] = -1  # random holes
    T = batch.query_seq.numel()
    args = [
        torch.randn(T, heads, dim, generator=gen), torch.randn(T, heads, generator=gen),
        torch.randn(batch.num_slots, dim, generator=gen), key_slots, batch.query_seq, batch.query_pos,
    ]  # fmt: skip
    args = [a.to(device) for a in args]
    got = indexer_scores(*args, dim**-0.5, backend="triton")
    want = indexer_scores(*args, dim**-0.5, backend="torch")
    assert torch.equal(torch.isinf(got), torch.isinf(want))
    finite = torch.isfinite(want)
    torch.testing.assert_close(got[finite], want[finite], atol=1e-4, rtol=1e-4)


@SETTINGS
@given(
    tokens=st.integers(1, 4),
    heads=st.integers(1, 33),
    rank=st.sampled_from([16, 48, 64]),
    rope=st.sampled_from([8, 16]),
    k=st.integers(1, 100),
    splits=st.integers(1, 4),
    seed=st.integers(0, 2**16),
)
def test_sparse_mla(tokens, heads, rank, rope, k, splits, seed, device):
    gen = torch.Generator().manual_seed(seed)
    cache = torch.randn(64, rank + rope, generator=gen).to(device)
    q = torch.randn(tokens, heads, rank + rope, generator=gen).to(device)
    slots = torch.randint(0, 64, (tokens, k), generator=gen, dtype=torch.int32)
    slots[torch.rand(slots.shape, generator=gen) < 0.3] = -1
    slots = slots.to(device)
    out, lse = sparse_mla_triton(q, cache, slots, 0.2, rank, num_splits=splits)
    ref_out, ref_lse = sparse_mla_attention(q, cache, slots, 0.2, rank, backend="torch")
    torch.testing.assert_close(out, ref_out, atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(lse, ref_lse, atol=1e-4, rtol=1e-4)


@SETTINGS
@given(
    tokens=st.integers(1, 20),
    experts=st.integers(1, 9),
    top_k=st.integers(1, 3),
    hidden=st.sampled_from([16, 40, 72]),
    inter=st.sampled_from([8, 24, 80]),
    seed=st.integers(0, 2**16),
)
def test_fused_moe(tokens, experts, top_k, hidden, inter, seed, device):
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(tokens, hidden, generator=gen)
    gate_up = torch.randn(experts, 2 * inter, hidden, generator=gen) * hidden**-0.5
    down = torch.randn(experts, hidden, inter, generator=gen) * inter**-0.5
    ids = torch.randint(-1, experts, (tokens, top_k), generator=gen)  # -1: another rank's expert
    weights = torch.rand(tokens, top_k, generator=gen)
    args = [a.to(device) for a in (x, gate_up, down, ids, weights)]
    got = fused_moe(*args, backend="triton")
    want = fused_moe(*args, backend="torch")
    torch.testing.assert_close(got, want, atol=1e-4, rtol=1e-4)
