"""Decoding through the paged cache gives the same logits as one full forward.

The full forward (expanded MLA) is the reference; single-token steps use the absorbed MLA, so
these tests also pin absorbed == expanded. Pages are deliberately non-contiguous and unordered.
"""

from __future__ import annotations

import pytest
import torch

from inference.forward_batch import ForwardBatch
from inference.loader import load_model

TOL = 1e-4
PAGE = 4


@pytest.fixture(scope="module")
def model(tiny_checkpoint):
    return load_model(tiny_checkpoint, dtype=torch.float32)


def _tokens(seed: int, n: int, vocab: int) -> list[int]:
    return torch.randint(0, vocab, (n,), generator=torch.Generator().manual_seed(seed)).tolist()


def _run_chunks(model, tokens, chunks, pages, cache):
    outs, pos = [], 0
    for n in chunks:
        batch = ForwardBatch.build([tokens[pos : pos + n]], [pos], [pages], logits="all")
        outs.append(model.forward_batch(batch, cache).logits)
        pos += n
    return torch.cat(outs)


def test_prefill_then_one_token_at_a_time(model):
    tokens = _tokens(0, 30, model.config.vocab_size)  # 30 > index_topk=8
    full = model(torch.tensor([tokens]))[0]
    cache = model.new_cache(num_pages=12, page_size=PAGE)
    pages = [9, 2, 7, 0, 11, 4, 5, 1]
    out = _run_chunks(model, tokens, [12] + [1] * 18, pages, cache)
    assert (out - full).abs().max().item() <= TOL


def test_chunked_prefill_in_uneven_chunks(model):
    tokens = _tokens(1, 30, model.config.vocab_size)
    full = model(torch.tensor([tokens]))[0]
    cache = model.new_cache(num_pages=8, page_size=PAGE)
    out = _run_chunks(model, tokens, [5, 1, 7, 3, 1, 1, 12], [3, 6, 1, 0, 7, 5, 2, 4], cache)
    assert (out - full).abs().max().item() <= TOL


@pytest.mark.parametrize("mode", ["sparse", "absorbed", "expanded"])
def test_every_mla_form_agrees_on_every_step_shape(model, mode):
    """Against one dense masked forward (the expanded form, as transformers computes it)."""
    tokens = _tokens(2, 26, model.config.vocab_size)
    model.attention_mode = "expanded"
    try:
        full = model(torch.tensor([tokens]))[0]
    finally:
        model.attention_mode = "auto"
    model.attention_mode = mode
    try:
        out = _run_chunks(model, tokens, [9, 1, 10, 1, 5], [0, 1, 2, 3, 4, 5, 6], model.new_cache(8, PAGE))
    finally:
        model.attention_mode = "auto"
    assert (out - full).abs().max().item() <= TOL


def test_mixed_batch_of_prefill_chunks_and_decodes(model):
    """One step holding a decode token of sequence 0 and a prefill chunk of sequence 1."""
    vocab = model.config.vocab_size
    a, b = _tokens(3, 21, vocab), _tokens(4, 17, vocab)
    full_a, full_b = model(torch.tensor([a]))[0], model(torch.tensor([b]))[0]
    cache = model.new_cache(num_pages=16, page_size=PAGE)
    pages_a, pages_b = [0, 2, 4, 6, 8, 10], [1, 3, 5, 7, 9]
    model.forward_batch(ForwardBatch.build([a[:20], b[:6]], [0, 0], [pages_a, pages_b]), cache)
    step = ForwardBatch.build([a[20:21], b[6:17]], [20, 6], [pages_a, pages_b], logits="all")
    out = model.forward_batch(step, cache).logits
    assert (out[0] - full_a[20]).abs().max().item() <= TOL
    assert (out[1:] - full_b[6:17]).abs().max().item() <= TOL


def test_logits_indices_and_hidden_states(model):
    tokens = _tokens(5, 12, model.config.vocab_size)
    full = model(torch.tensor([tokens]))[0]
    batch = ForwardBatch.build([tokens], [0], [[0, 1, 2]], logits="all")
    batch.logits_indices = torch.tensor([3, 11])
    out = model.forward_batch(batch, model.new_cache(3, PAGE), return_all_hidden=True)
    assert out.logits.shape == (2, model.config.vocab_size)
    assert out.hidden_states.shape == (2, model.config.hidden_size)
    assert out.all_hidden_states.shape == (12, model.config.hidden_size)
    assert torch.equal(out.all_hidden_states[[3, 11]], out.hidden_states)
    assert (out.logits - full[[3, 11]]).abs().max().item() <= TOL


def test_copy_on_write_of_a_shared_partial_page(model):
    """Sequence B shares A's first 6 tokens: full page 0 by reference, partial page 1 copied."""
    vocab = model.config.vocab_size
    prefix = _tokens(6, 6, vocab)
    a, b = prefix + _tokens(7, 10, vocab), prefix + _tokens(8, 12, vocab)
    cache = model.new_cache(num_pages=12, page_size=PAGE)
    pages_a = [0, 1, 2, 3]
    model.forward_batch(ForwardBatch.build([a], [0], [pages_a]), cache)
    cache.copy_pages(torch.tensor([1]), torch.tensor([5]))
    pages_b = [0, 5, 6, 7, 8]
    out = model.forward_batch(ForwardBatch.build([b[6:]], [6], [pages_b], logits="all"), cache).logits
    assert (out - model(torch.tensor([b]))[0][6:]).abs().max().item() <= TOL


def test_pages_survive_a_round_trip_through_host_memory(model):
    tokens = _tokens(9, 24, model.config.vocab_size)
    full = model(torch.tensor([tokens]))[0]
    cache = model.new_cache(num_pages=10, page_size=PAGE)
    model.forward_batch(ForwardBatch.build([tokens[:16]], [0], [[0, 1, 2, 3]]), cache)
    saved = cache.read_pages(torch.tensor([0, 1, 2, 3]))
    assert saved.nbytes == 4 * PAGE * cache.bytes_per_token()
    for t in [*cache.latent, *cache.indexer.values()]:
        t.zero_()
    new_pages = [7, 4, 9, 5, 6, 8]
    cache.write_pages(torch.tensor(new_pages[:4]), saved)
    out = _run_chunks_from(model, tokens, 16, [3, 1, 4], new_pages, cache)
    assert (out - full[16:]).abs().max().item() <= TOL


def _run_chunks_from(model, tokens, start, chunks, pages, cache):
    outs, pos = [], start
    for n in chunks:
        batch = ForwardBatch.build([tokens[pos : pos + n]], [pos], [pages], logits="all")
        outs.append(model.forward_batch(batch, cache).logits)
        pos += n
    return torch.cat(outs)


def test_kernel_path_matches_the_native_path(model):
    """The GPU route (slot lists + kernels.indexer_topk / sparse_mla_attention / fused_moe), run
    here with the kernels' torch references, gives the native path's logits, prefill and decode."""
    tokens = _tokens(10, 28, model.config.vocab_size)
    full = model(torch.tensor([tokens]))[0]
    model.kernel_backend = "torch"
    try:
        out = _run_chunks(model, tokens, [11, 1, 1, 9, 1, 5], [4, 0, 6, 2, 5, 1, 3], model.new_cache(7, PAGE))
    finally:
        model.kernel_backend = "auto"
    assert (out - full).abs().max().item() <= TOL


def test_bf16_model_and_cache_run_the_same_path(tiny_checkpoint):
    """bf16 (the real checkpoints' dtype): the cache follows the model dtype, the router and the
    indexer head weights stay fp32, and decode stays close to the fp32 reference."""
    bf16 = load_model(tiny_checkpoint, dtype=torch.bfloat16)
    fp32 = load_model(tiny_checkpoint, dtype=torch.float32)
    tokens = _tokens(11, 6, bf16.config.vocab_size)  # <= index_topk: no selection to flip
    cache = bf16.new_cache(2, PAGE)
    assert cache.latent[0].dtype == torch.bfloat16
    out = _run_chunks(bf16, tokens, [4, 1, 1], [1, 0], cache)
    assert out.dtype == torch.bfloat16 and out.isfinite().all()
    ref = fp32(torch.tensor([tokens]))[0]
    assert (out.float() - ref).abs().max().item() < 0.1 * ref.abs().max().item()


def test_score_chunking_is_exact(model, monkeypatch):
    """Long prefills bound their [rows, heads, keys] score blocks by chunking query rows; a tiny
    bound (several chunks per step) must not change any logit."""
    import inference.layers.indexer as indexer
    import inference.layers.mla as mla

    tokens = _tokens(12, 26, model.config.vocab_size)
    full = model(torch.tensor([tokens]))[0]
    monkeypatch.setattr(indexer, "MAX_SCORE_ELEMENTS", 200)
    monkeypatch.setattr(mla, "MAX_SCORE_ELEMENTS", 200)
    chunked = model(torch.tensor([tokens]))[0]
    assert (chunked - full).abs().max().item() <= TOL  # GEMM blocking may round differently
