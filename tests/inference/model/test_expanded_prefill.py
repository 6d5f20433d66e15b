"""The kernel path's expanded MLA form for prefill chunks (inference/layers/expanded_prefill.py),
run here through the kernels' torch references: the tokens it expands give the native path's
logits, alone, mixed with absorbed tokens in one step, and (forced) with a DSA selection in force."""

from __future__ import annotations

import pytest
import torch

import inference.layers.expanded_prefill as ep
from inference.forward_batch import AttentionMetadata, ForwardBatch
from inference.loader import load_model
from inference.random_checkpoint import write_random_checkpoint

TOL = 1e-4
PAGE = 4


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    # index_topk 24: chunks longer than ABSORB_MAX_QUERY_LEN can still have no DSA selection
    path = write_random_checkpoint(tmp_path_factory.mktemp("ckpt-topk24"), "tiny", seed=5, overrides={"index_topk": 24})
    return load_model(path, dtype=torch.float32)


@pytest.fixture
def expanded_rows(monkeypatch):
    """Counts the tokens each layer attends in the expanded form."""
    counts: list[int] = []
    real = ep.attend

    def counting(plan, *args, **kwargs):
        counts.append(plan.tokens.numel())
        return real(plan, *args, **kwargs)

    monkeypatch.setattr(ep, "attend", counting)
    return counts


def _tokens(seed, n, vocab):
    return torch.randint(0, vocab, (n,), generator=torch.Generator().manual_seed(seed)).tolist()


def _kernel_path(model, mode="auto"):
    model.kernel_backend, model.attention_mode = "torch", mode
    return model


@pytest.fixture(autouse=True)
def _restore(model):
    yield
    model.kernel_backend, model.attention_mode = "auto", "auto"


def _run(model, tokens, chunks, pages):
    cache, outs, pos = model.new_cache(len(pages) + 1, PAGE), [], 0
    for n in chunks:
        outs.append(model.forward_batch(ForwardBatch.build([tokens[pos : pos + n]], [pos], [pages], "all"), cache).logits)
        pos += n
    return torch.cat(outs)


def test_long_chunks_without_selection_are_expanded(model, expanded_rows):
    tokens = _tokens(0, 23, model.config.vocab_size)  # <= index_topk: no selection anywhere
    full = model(torch.tensor([tokens]))[0]
    out = _run(_kernel_path(model), tokens, [14, 1, 8], [3, 0, 5, 1, 4, 2])
    assert (out - full).abs().max().item() <= TOL
    layers = model.config.num_hidden_layers
    assert expanded_rows == [14] * layers  # the 14-token chunk expanded in every layer; 1 and 8 absorbed


def test_a_step_mixing_decode_and_a_prefill_chunk_splits_by_sequence(model, expanded_rows):
    vocab = model.config.vocab_size
    a, b = _tokens(1, 21, vocab), _tokens(2, 20, vocab)
    full_a, full_b = model(torch.tensor([a]))[0], model(torch.tensor([b]))[0]
    _kernel_path(model)
    cache = model.new_cache(num_pages=14, page_size=PAGE)
    pages_a, pages_b = [0, 2, 4, 6, 8, 10], [1, 3, 5, 7, 9]
    model.forward_batch(ForwardBatch.build([a[:20], b[:3]], [0, 0], [pages_a, pages_b]), cache)
    step = ForwardBatch.build([a[20:21], b[3:20]], [20, 3], [pages_a, pages_b], logits="all")
    out = model.forward_batch(step, cache).logits
    assert (out[0] - full_a[20]).abs().max().item() <= TOL
    assert (out[1:] - full_b[3:20]).abs().max().item() <= TOL
    layers = model.config.num_hidden_layers
    assert expanded_rows == [20] * layers + [17] * layers  # step 1: all of a; step 2: b's chunk only


def test_forced_expanded_form_honours_the_dsa_selection(model, expanded_rows):
    """Past index_topk keys every token attends its top-k only; the expanded kernel path gives the
    native (sparse) path's logits, and it is not the dense causal attention."""
    tokens = _tokens(3, 40, model.config.vocab_size)
    full = model(torch.tensor([tokens]))[0]
    pages = [9, 2, 7, 0, 11, 4, 5, 1, 3, 6, 8]
    out = _run(_kernel_path(model, "expanded"), tokens, [30, 1, 9], pages)
    assert (out - full).abs().max().item() <= TOL
    assert expanded_rows and all(n > 0 for n in expanded_rows)
    # Attention over every visible key (index_topk past the prompt) differs: the selection mattered.
    model.kernel_backend, model.attention_mode = None, "auto"
    with_all_keys = _with_topk(model, 64, lambda: model(torch.tensor([tokens]))[0])
    assert (with_all_keys - full).abs().max().item() > 1e-3


def _with_topk(model, topk, fn):
    layers = [layer.self_attn for layer in model.model.layers]
    saved = [(m.topk, m.indexer.topk if m.indexer is not None else None) for m in layers]
    try:
        for m in layers:
            m.topk = topk
            if m.indexer is not None:
                m.indexer.topk = topk
        return fn()
    finally:
        for m, (t, it) in zip(layers, saved):
            m.topk = t
            if m.indexer is not None:
                m.indexer.topk = it


def test_the_rule_keeps_short_chunks_after_long_prefixes_absorbed(model):
    dims = model.model.layers[0].self_attn.dims
    q_lens, seq_lens = torch.tensor([9, 9, 200, 9, 20]), torch.tensor([9, 2000, 2000, 24, 24])
    assert ep.expanded_is_cheaper(q_lens, seq_lens, dims).tolist() == [True, False, True, False, True]
    # A step of a fresh 9-token prompt and one decode token: only the prompt is expanded.
    batch = ForwardBatch.build([[1] * 9, [1]], [0, 5], [[0, 1, 2], [5, 6]])
    meta = AttentionMetadata.from_batch(batch, PAGE, masks=False)
    plan = ep.plan(meta, "auto", 24, dims)
    assert plan.tokens.tolist() == list(range(9)) and plan.absorbed.tolist() == [9]
    assert plan.key_slots.tolist() == list(range(9)) and plan.key_start.tolist() == [0, 9]
    assert not plan.with_selection
    assert ep.plan(meta, "auto", 8, dims) is None  # 9 keys > index_topk: the selection stays absorbed
    assert ep.plan(meta, "absorbed", 24, dims) is None
    decode = AttentionMetadata.from_batch(ForwardBatch.build([[1], [1]], [11, 5], [[0, 1, 2], [5, 6]]), PAGE, False)
    assert ep.plan(decode, "auto", 24, dims) is None
