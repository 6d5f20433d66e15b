"""The compiled decode path (inference/decode_compiler.py) computes what the eager path computes.

Compiling costs tens of seconds on CPU, so one module-scoped compiled model serves every test and
the steps below cover both graphs it builds: context up to `index_topk` keys and beyond.
"""

from __future__ import annotations

import pytest
import torch

from inference.forward_batch import ForwardBatch
from inference.loader import load_model

PAGE = 4
TOL = 1e-4


@pytest.fixture(scope="module")
def models(tiny_checkpoint):
    eager = load_model(tiny_checkpoint, dtype=torch.float32)
    compiled = load_model(tiny_checkpoint, dtype=torch.float32)
    compiled.compile_decode()
    return eager, compiled


def _decode(model, prompt: list[int], steps: int, pages: list[int], kv_cache_dtype: str = "auto"):
    """-> (greedy tokens, logits of every decode step)"""
    cache = model.new_cache(num_pages=len(pages) + 1, page_size=PAGE, kv_cache_dtype=kv_cache_dtype)
    token = int(model.forward_batch(ForwardBatch.build([prompt], [0], [pages]), cache).logits[0].argmax())
    tokens, logits = [], []
    for i in range(steps):
        out = model.forward_batch(ForwardBatch.build([[token]], [len(prompt) + i], [pages]), cache)
        logits.append(out.logits)
        token = int(out.logits[0].argmax())
        tokens.append(token)
    return tokens, logits


def test_compiled_decode_matches_eager_across_the_index_topk_boundary(models):
    eager, compiled = models
    topk = eager.config.index_topk  # 8 in the tiny preset: steps run at 4..23 keys
    prompt = torch.randint(0, eager.config.vocab_size, (topk - 4,), generator=torch.Generator().manual_seed(0)).tolist()
    pages = [5, 0, 3, 1, 4, 2]  # unordered, non-contiguous
    calls = compiled._decode_compiler.calls
    want_tokens, want = _decode(eager, prompt, 20, pages)
    got_tokens, got = _decode(compiled, prompt, 20, pages)
    assert compiled._decode_compiler.calls - calls == 20  # every decode step, not the prefill
    assert got_tokens == want_tokens
    assert max((a - b).abs().max().item() for a, b in zip(got, want)) <= TOL


def test_compiled_decode_over_an_fp8_cache_matches_eager(tiny_checkpoint):
    eager = load_model(tiny_checkpoint, dtype=torch.float32)
    compiled = load_model(tiny_checkpoint, dtype=torch.float32)
    compiled.compile_decode()
    prompt, pages = list(range(3, 9)), [4, 0, 3, 1, 5, 2]
    want_tokens, want = _decode(eager, prompt, 12, pages, "fp8")
    got_tokens, got = _decode(compiled, prompt, 12, pages, "fp8")
    assert compiled._decode_compiler.calls == 12 and compiled._decode_compiler.failure is None
    assert got_tokens == want_tokens
    assert max((a - b).abs().max().item() for a, b in zip(got, want)) <= TOL


def test_compiled_model_keeps_batched_and_multi_token_steps_eager(models):
    eager, compiled = models
    prompts = [[3, 4, 5, 6, 7], [8, 9, 10]]
    pages = [[0, 1, 2], [3, 4, 5]]
    calls = compiled._decode_compiler.calls
    outs = []
    for model in (eager, compiled):
        cache = model.new_cache(num_pages=6, page_size=PAGE)
        first = model.forward_batch(ForwardBatch.build(prompts, [0, 0], pages), cache).logits
        step = model.forward_batch(ForwardBatch.build([[11], [12]], [5, 3], pages), cache).logits
        outs.append(torch.cat([first, step]))
    assert compiled._decode_compiler.calls == calls
    assert torch.equal(outs[0], outs[1])  # the same eager code, bit for bit


def test_compile_decode_can_be_turned_off(tiny_checkpoint):
    model = load_model(tiny_checkpoint, dtype=torch.float32)
    model.compile_decode()
    model.compile_decode(enabled=False)
    assert model._decode_compiler is None


def test_a_failing_compile_falls_back_to_eager_for_good(tiny_checkpoint, caplog):
    from inference.decode_compiler import DecodeCompiler

    def broken_backend(graph, example_inputs):
        raise RuntimeError("no C++ compiler here")

    eager = load_model(tiny_checkpoint, dtype=torch.float32)
    model = load_model(tiny_checkpoint, dtype=torch.float32)
    model._decode_compiler = DecodeCompiler(model._layer_stack, backend=broken_backend)
    prompt, pages = [3, 4, 5, 6, 7, 8, 9, 10, 11, 12], [0, 1, 2, 3, 4]
    with caplog.at_level("WARNING", logger="inference.decode_compiler"):
        got_tokens, got = _decode(model, prompt, 4, pages)
    want_tokens, want = _decode(eager, prompt, 4, pages)
    assert got_tokens == want_tokens and all(torch.equal(a, b) for a, b in zip(got, want))
    assert "no C++ compiler here" in model._decode_compiler.failure
    assert model._decode_compiler.calls == 0 and len(caplog.records) == 1  # one warning, then plain eager


def test_hitting_dynamos_graph_limit_falls_back_instead_of_silently_running_eager(tiny_checkpoint):
    """The dense 'expanded' form sizes its chunks from the context length, so compiled it needs a
    new graph every step; past dynamo's per-function limit the step must fall back loudly (and
    `calls` stop counting) rather than run uncompiled while claiming to be compiled."""
    eager = load_model(tiny_checkpoint, dtype=torch.float32)
    model = load_model(tiny_checkpoint, dtype=torch.float32)
    eager.attention_mode = model.attention_mode = "expanded"
    model.compile_decode()
    prompt, pages = [3, 4, 5, 6, 7, 8, 9, 10, 11, 12], [0, 1, 2, 3, 4, 5, 6, 7]
    try:
        with torch._dynamo.config.patch(recompile_limit=2):  # the default 8 would only take longer
            got_tokens, got = _decode(model, prompt, 6, pages)
        want_tokens, want = _decode(eager, prompt, 6, pages)
        assert got_tokens == want_tokens
        assert max((a - b).abs().max().item() for a, b in zip(got, want)) <= TOL
        assert "recompile limit" in model._decode_compiler.failure
        assert model._decode_compiler.calls < 6  # (the limit counts graphs of earlier models too)
    finally:
        torch._dynamo.reset()  # the limit counts per function: leave none of it used up for later tests
