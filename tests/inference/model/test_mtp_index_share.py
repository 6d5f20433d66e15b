"""index_share_for_mtp_iteration: later MTP draft steps attend over the first draft's selection.

The check is that a step given `reuse_selection` computes exactly what the MTP layer computes
when its indexer is made to return that selection, and that the indexer does not run. The
engine-level check (greedy output unchanged with MTP drafting on) is in tests/inference/engine.
"""

from __future__ import annotations

import pytest
import torch

from inference.forward_batch import ForwardBatch
from inference.loader import load_model

PAGE = 4


@pytest.fixture(scope="module")
def model(tiny_checkpoint):
    return load_model(tiny_checkpoint, dtype=torch.float32)


def _first_pass(model, tokens, pages, cache):
    """Target prefill, then the MTP pass over every position (what the engine's catch-up does)."""
    batch = ForwardBatch.build([tokens], [0], [pages], logits="all")
    hidden = model.forward_batch(batch, cache, return_all_hidden=True).all_hidden_states
    nxt = ForwardBatch.build([tokens[1:] + [7]], [0], [pages])  # t_{p+1} at each position p
    return model.mtp_forward(nxt, hidden, cache, return_all_hidden=True)


@pytest.mark.parametrize("backend", [None, "torch"], ids=["native", "kernels-torch"])
def test_a_reusing_draft_step_attends_over_the_first_drafts_selection(model, backend):
    tokens = torch.randint(3, 400, (20,), generator=torch.Generator().manual_seed(3)).tolist()  # > index_topk
    pages = [3, 0, 5, 1, 4, 2, 6]
    mtp = model.model.layers[model.config.num_hidden_layers]
    model.kernel_backend = backend
    try:
        runs = []
        for reuse in (True, False):
            cache = model.new_cache(num_pages=8, page_size=PAGE)
            first = _first_pass(model, tokens, pages, cache)
            assert first.draft_selection is not None
            shared = first.draft_selection.sequences_of([0])
            step = ForwardBatch.build([[11]], [len(tokens)], [pages])
            prev = first.hidden_states
            if reuse:
                calls = []
                real = mtp.self_attn.indexer.forward
                mtp.self_attn.indexer.forward = lambda *a, **k: calls.append(1) or real(*a, **k)
                mtp.self_attn.indexer.select_slots = lambda *a, **k: calls.append(1)
                try:
                    out = model.mtp_forward(step, prev, cache, reuse_selection=shared)
                finally:
                    del mtp.self_attn.indexer.forward, mtp.self_attn.indexer.select_slots
                assert calls == []  # the indexer did not run
                assert out.draft_selection is None
            else:  # reference: the ordinary step with the indexer's answer replaced by the shared one
                if backend is None:
                    mtp.self_attn.indexer.forward = lambda *a, **k: shared
                else:
                    mtp.self_attn.indexer.select_slots = lambda *a, **k: shared
                try:
                    out = model.mtp_forward(step, prev, cache)
                finally:
                    mtp.self_attn.indexer.__dict__.pop("forward", None)
                    mtp.self_attn.indexer.__dict__.pop("select_slots", None)
            runs.append(out.logits)
        assert torch.equal(runs[0], runs[1])
        # ... and the shared selection is not what the step would have chosen on its own.
        cache = model.new_cache(num_pages=8, page_size=PAGE)
        first = _first_pass(model, tokens, pages, cache)
        own = model.mtp_forward(ForwardBatch.build([[11]], [len(tokens)], [pages]), first.hidden_states, cache)
        assert not torch.equal(own.logits, runs[0])
    finally:
        model.kernel_backend = "auto"


def test_reuse_is_only_for_one_token_per_sequence(model):
    tokens = list(range(3, 23))
    pages = [0, 1, 2, 3, 4, 5, 6]
    cache = model.new_cache(num_pages=8, page_size=PAGE)
    first = _first_pass(model, tokens, pages, cache)
    two = ForwardBatch.build([[11, 12]], [len(tokens)], [pages])
    with pytest.raises(ValueError, match="one new token per sequence"):
        model.mtp_forward(two, first.all_hidden_states[:2], cache, reuse_selection=first.draft_selection.sequences_of([0]))
