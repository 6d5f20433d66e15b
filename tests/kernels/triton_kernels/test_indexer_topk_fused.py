"""The fused indexer scores + top-k kernel vs the reference selection (kernels/indexer_topk_fused.py).

Exact-selection cases use small integers (and power-of-two scales), so every score is exact in
fp32 and bf16 alike and any difference in the chosen keys, their order or the tie rule (ties to
the earlier position) is a bug, not rounding. Random cases compare the selected score multisets."""

from __future__ import annotations

import pytest
import torch

from kernels.fp8_cache import indexer_page_bytes
from kernels.indexer_topk import indexer_scores, indexer_topk
from kernels.indexer_topk_fused import indexer_topk_fp8, indexer_topk_fp8_triton, indexer_topk_fused_triton

H, D = 4, 32


def _batch(make_paged_batch, gen, seq_lens=(70, 21, 150), query_lens=(1, 2, 2), page=8):
    return make_paged_batch(list(seq_lens), list(query_lens), page, gen)


def _int_inputs(batch, gen, dtype, levels: int):
    """Integer q/keys in [-levels, levels]; levels=0 makes every score equal (all zero)."""
    T = batch.query_seq.numel()
    keys = torch.randint(-levels, levels + 1, (batch.num_slots, D), generator=gen).to(dtype)
    q = torch.randint(-2, 3, (T, H, D), generator=gen).to(dtype)
    w = torch.randint(-2, 3, (T, H), generator=gen).float()
    return q, w, keys


def _args(batch, device, *tensors):
    return [t.to(device) for t in tensors] + [batch.key_slots.to(device), batch.query_seq.to(device),
                                              batch.query_pos.to(device)]  # fmt: skip


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("levels", [0, 1])  # all-equal scores, heavy ties
@pytest.mark.parametrize("topk", [16, 1000])  # 1000 > every context: shorter than k
def test_exact_selection_and_tie_rule(levels, topk, dtype, gen, device, make_paged_batch):
    batch = _batch(make_paged_batch, gen)
    args = _args(batch, device, *_int_inputs(batch, gen, dtype, levels))
    want = indexer_topk(*args, topk, 0.25, backend="torch")
    for splits in (1, 3) if topk == 16 else (1,):
        got = indexer_topk_fused_triton(*args, topk, 0.25, num_splits=splits)
        assert torch.equal(got.positions, want.positions), f"splits={splits}"
        assert torch.equal(got.slots, want.slots)
    if levels == 0:  # every visible key ties: the earliest positions win, in order
        first = want.positions[0][want.positions[0] >= 0]
        assert torch.equal(first.cpu(), torch.arange(first.numel(), dtype=torch.int32))


def test_random_scores_select_the_best_keys(gen, device, make_paged_batch):
    batch = _batch(make_paged_batch, gen, seq_lens=(200, 50), query_lens=(1, 2))
    T = batch.query_seq.numel()
    q, w = torch.randn(T, H, D, generator=gen), torch.randn(T, H, generator=gen)
    keys = torch.randn(batch.num_slots, D, generator=gen)
    args = _args(batch, device, q, w, keys)
    scores = indexer_scores(*args, D**-0.5, backend="torch")
    got = indexer_topk_fused_triton(*args, 64, D**-0.5, num_splits=2)
    want = indexer_topk(*args, 64, D**-0.5, backend="torch")
    assert torch.equal(got.positions >= 0, want.positions >= 0)
    for t in range(T):
        g, r = got.positions[t][got.positions[t] >= 0].long(), want.positions[t][want.positions[t] >= 0].long()
        torch.testing.assert_close(scores[t, g], scores[t, r], atol=1e-5, rtol=1e-5)  # same order of scores


def test_holes_are_never_selected(gen, device, make_paged_batch):
    batch = _batch(make_paged_batch, gen)
    batch.key_slots[2, 10:100] = -1  # e.g. evicted keys
    args = _args(batch, device, *_int_inputs(batch, gen, torch.float32, 1))
    got = indexer_topk_fused_triton(*args, 64, 0.25)
    want = indexer_topk(*args, 64, 0.25, backend="torch")
    assert torch.equal(got.positions, want.positions) and torch.equal(got.slots, want.slots)
    seq2 = args[4] == 2
    assert not ((got.positions[seq2] >= 10) & (got.positions[seq2] < 100)).any()


def _fp8_pages(keys: torch.Tensor, page: int, gen) -> torch.Tensor:
    """FP8 indexer pages holding integer e4m3 values and power-of-two scales (exactly dequantizable)."""
    n = keys.shape[0]
    pages = torch.empty(n // page, indexer_page_bytes(page, D), dtype=torch.uint8)
    scales = 2.0 ** torch.randint(-2, 2, (n,), generator=gen).float()
    pages[:, : page * D] = keys.to(torch.float8_e4m3fn).view(torch.uint8).reshape(n // page, page * D)
    pages[:, page * D :] = scales.view(torch.uint8).reshape(n // page, page * 4)
    return pages


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("levels", [0, 2])
def test_fp8_pages_exact_selection(levels, dtype, gen, device, make_paged_batch):
    batch = _batch(make_paged_batch, gen)
    q, w, keys = _int_inputs(batch, gen, torch.float32, levels)
    pages = _fp8_pages(keys, 8, gen).to(device)
    q = q.to(dtype).to(device)
    rest = _args(batch, device, w)
    for topk in (16, 1000):
        want = indexer_topk_fp8(q, rest[0], pages, 8, *rest[1:], topk, 0.25, backend="torch")
        got = indexer_topk_fp8_triton(q, rest[0], pages, 8, *rest[1:], topk, 0.25, num_splits=2)
        assert torch.equal(got.positions, want.positions) and torch.equal(got.slots, want.slots)


def test_fp8_pages_of_quantized_random_keys(gen, device, make_paged_batch):
    """kv_formats' own quantizer writes the pages; the kernel selects like dequantize-then-score."""
    from inference.kv_formats import Fp8IndexerRows

    batch = _batch(make_paged_batch, gen, seq_lens=(120, 40), query_lens=(1, 2))
    T = batch.query_seq.numel()
    storage = torch.zeros(batch.num_slots // 8, indexer_page_bytes(8, D), dtype=torch.uint8)
    rows = Fp8IndexerRows(storage, 8, D, torch.float32)
    rows.write(torch.arange(batch.num_slots), torch.randn(batch.num_slots, D, generator=gen))
    q = rows.prepare_query(torch.randn(T, H, D, generator=gen))
    w = torch.randn(T, H, generator=gen)
    args = _args(batch, device, q, w)
    got = indexer_topk_fp8(args[0], args[1], storage.to(device), 8, *args[2:], 32, D**-0.5, backend="triton")
    want = indexer_topk_fp8(args[0], args[1], storage.to(device), 8, *args[2:], 32, D**-0.5, backend="torch")
    dense = rows.gather(torch.arange(batch.num_slots)).to(device)
    scores = indexer_scores(args[0], args[1], dense, *args[2:], D**-0.5, backend="torch")
    assert torch.equal(got.positions >= 0, want.positions >= 0)
    for t in range(T):
        g, r = got.positions[t][got.positions[t] >= 0].long(), want.positions[t][want.positions[t] >= 0].long()
        torch.testing.assert_close(scores[t, g], scores[t, r], atol=1e-5, rtol=1e-5)
