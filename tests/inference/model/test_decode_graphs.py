"""Decode graphs (inference/engine/decode_graphs.py) compute what the eager step computes.

On the CPU a graph is torch.compile of the uniform step; one module-scoped compiled runner serves
every test, and with dynamic shapes it builds one graph for every batch bucket and width (paid
once per process; inductor caches the generated code on disk across processes).

NOTE: page size 16 and latent_norm_eps 1e-6 are those of the engine tests and of
benchmarks/model_forward.py (both are constants of the traced graph): the three compile the same
target-step graph, so in one test run only the first pays inductor's code generation.
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from inference.engine.decode_buffers import StepShape
from inference.engine.decode_graphs import DecodeGraphs, GraphSettings, batch_buckets, width_buckets
from inference.forward_batch import ForwardBatch
from inference.loader import load_model

PAGE = 16
PAGES = 48  # the graph runners' scratch page is page PAGES, past the sequences' pages
TOL = 1e-4


@pytest.fixture(scope="module")
def model(tiny_checkpoint):
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # as in the engine tests: tiny ops, and on 2 busy cores threads only spin
    yield load_model(tiny_checkpoint, dtype=torch.float32, latent_norm_eps=1e-6)
    torch.set_num_threads(threads)


def _runner(model, mode: str, max_batch: int = 4) -> DecodeGraphs:
    cache = model.new_cache(num_pages=PAGES + 1, page_size=PAGE)
    settings = GraphSettings.build(model.config, mode, max_batch, max_sequence=PAGES * PAGE, page_size=PAGE,
                                   pad_page=None if mode == "eager" else PAGES)  # fmt: skip
    return DecodeGraphs(model, cache, settings)


@pytest.fixture(scope="module")
def compiled(model):
    graphs = _runner(model, "compile")
    assert graphs.prepare() == 2  # batches of four and two, traced at start-up (one graph)
    return graphs


def _page_lists(lens: list[int], steps: int) -> list[list[int]]:
    """Interleaved, unordered pages: sequence i gets pages i, i + n, i + 2n, ... reversed in pairs."""
    n, out = len(lens), []
    for i, length in enumerate(lens):
        need = -(-(length + steps) // PAGE)
        pages = [i + n * j for j in range(need)]
        out.append([p for pair in zip(pages[1::2], pages[0::2]) for p in pair] + pages[len(pages) // 2 * 2:])
    return out


def _decode(graphs: DecodeGraphs | None, model, prompts: list[list[int]], steps: int, cache=None):
    """Greedy decode of every prompt together: prefill through the general forward, then `steps`
    uniform steps through `graphs` (None: the general forward). -> (tokens per step, logits per step)."""
    cache = cache if cache is not None else (graphs.cache if graphs is not None else
                                             model.new_cache(num_pages=PAGES + 1, page_size=PAGE))
    lens = [len(p) for p in prompts]
    pages = _page_lists(lens, steps)
    first = model.forward_batch(ForwardBatch.build(prompts, [0] * len(prompts), pages), cache).logits
    token = first.argmax(-1).tolist()
    tokens, logits = [], []
    for i in range(steps):
        starts = [n + i for n in lens]
        if graphs is None:
            out = model.forward_batch(ForwardBatch.build([[t] for t in token], starts, pages), cache)
        else:
            out = graphs.target([[t] for t in token], starts, pages, len(token), want_hidden=False)
            assert out is not None, "a decode step the runner should serve"
        logits.append(out.logits.clone())
        token = out.logits.argmax(-1).tolist()
        tokens.append(token)
    return tokens, logits


def _prompts(lens: list[int]) -> list[list[int]]:
    g = torch.Generator().manual_seed(sum(lens))
    return [torch.randint(3, 500, (n,), generator=g).tolist() for n in lens]


# Batches of every bucket (2, 4; one sequence pads to 2 when compiled) and one padded (3 -> 4);
# contexts from below index_topk (8) to past several width buckets (2, 4, 8, 16 pages).
@pytest.mark.parametrize("lens", [[5], [70, 2], [7, 40, 1], [4, 11, 120, 9]])
def test_compiled_steps_equal_eager_steps_at_every_bucket(model, compiled, lens):
    eager = _runner(model, "eager")
    prompts = _prompts(lens)
    calls = compiled.compilers["target"].calls
    want_tokens, want = _decode(eager, model, prompts, 12)
    got_tokens, got = _decode(compiled, model, prompts, 12)
    assert compiled.compilers["target"].calls - calls == 12 and compiled.compilers["target"].failure is None
    assert got_tokens == want_tokens
    assert max((a - b).abs().max().item() for a, b in zip(got, want)) <= TOL


@pytest.mark.parametrize("kernels", [None, "torch"])  # native path; the kernels' path (torch references)
def test_the_eager_uniform_step_equals_the_general_forward(model, kernels):
    prompts = _prompts([6, 17, 3])
    model.kernel_backend = kernels
    try:
        want_tokens, want = _decode(None, model, prompts, 10)
        got_tokens, got = _decode(_runner(model, "eager"), model, prompts, 10)
    finally:
        model.kernel_backend = "auto"
    assert got_tokens == want_tokens
    assert max((a - b).abs().max().item() for a, b in zip(got, want)) <= TOL


def test_padding_rows_write_only_the_scratch_page(model, compiled):
    cache = compiled.cache
    for t in cache.latent + list(cache.indexer.values()):
        t.fill_(7.0)  # a value no layer writes
    prompts = _prompts([5, 9, 14])  # 3 sequences: bucket 4, one padding row
    _decode(compiled, model, prompts, 3)
    used = {p for pages in _page_lists([5, 9, 14], 3) for p in pages}
    layers = model.config.num_hidden_layers  # (the MTP layer's pages are not written by target steps)
    for t in cache.latent[:layers] + [t for i, t in cache.indexer.items() if i < layers]:
        written = (t != 7.0).flatten(1).any(1).nonzero().flatten().tolist()
        assert set(written) <= used | {PAGES} and PAGES in written


def test_steps_it_does_not_serve_go_back_to_the_caller(model, compiled):
    pages = _page_lists([3, 3], 2)
    assert compiled.target([[1], [2, 3]], [3, 3], pages, 3, False) is None  # mixed query lengths
    assert compiled.target([[1], [2]], [3, 3], pages, 1, False) is None  # not every row's logits
    assert compiled.target([[1]] * 5, [3] * 5, _page_lists([3] * 5, 1), 5, False) is None  # above the largest bucket
    assert compiled.target([[1]], [PAGES * PAGE], [list(range(PAGES))], 1, False) is None  # wider than any bucket
    assert compiled.target([[1, 2]], [3], pages[:1], 2, False) is None  # T = 2 is not a served step


def test_buckets():
    assert batch_buckets(64) == [1, 2, 4, 8, 16, 32, 48, 64]
    assert batch_buckets(4) == [1, 2, 4] and batch_buckets(1) == [1] and batch_buckets(20) == [1, 2, 4, 8, 16, 20]
    assert width_buckets(3, 25) == [3, 6, 12, 24, 25] and width_buckets(33, 33) == [33]
    glm53 = SimpleNamespace(index_topk=2048, index_share_for_mtp_iteration=True)
    settings = GraphSettings.build(glm53, "cuda_graphs", 64, 131072, 64, num_draft=3, pad_page=0)
    assert (settings.min_width, settings.max_width) == (33, 2049)  # S > index_topk; drafts past the end
    assert settings.target_tokens == (4,) and settings.mtp_tokens == (1, 4) and settings.share_selection


def test_shapes_pad_to_buckets_in_graph_modes_only(model, compiled):
    assert compiled.shape_for(3, 1, 7) == StepShape(4, 1, 8)
    assert compiled.shape_for(1, 1, 1) == StepShape(2, 1, 2)  # compiled from 2 sequences; at least 2 pages
    eager = _runner(model, "eager")
    assert eager.shape_for(3, 1, 7) == StepShape(3, 1, 7) and eager.shape_for(3, 1, 1) == StepShape(3, 1, 2)
    one = _runner(model, "compile", max_batch=1)  # (nothing compiled: no step runs)
    assert one.batches == [2] and one.shape_for(1, 1, 2) == StepShape(2, 1, 2)
    one.buffers.stage(StepShape(2, 1, 2), [[5]], [4], [[0, 1]], PAGES)  # its buffers hold the padded batch


@pytest.mark.parametrize("kernels", [None, "torch"])
def test_what_a_captured_graph_leaves_in_its_output_buffers(model, kernels):
    """The CUDA-graph mode's output side, run on the CPU: the copies a captured graph ends with put
    exactly the step's results (target and both MTP pass kinds) where a replay returns them."""
    from inference.engine.decode_graphs import Signature

    model.kernel_backend = kernels
    try:
        cache = model.new_cache(num_pages=PAGES + 1, page_size=PAGE)
        settings = GraphSettings.build(SimpleNamespace(index_topk=model.config.index_topk, index_share_for_mtp_iteration=True),
                                       "eager", 4, PAGES * PAGE, PAGE, num_draft=2, pad_page=PAGES)  # fmt: skip
        graphs = DecodeGraphs(model, cache, settings)
        graphs.outputs = graphs._output_buffers()
        lens = [5, 9, 14]
        pages = _page_lists(lens, 4)
        model.forward_batch(ForwardBatch.build(_prompts(lens), [0, 0, 0], pages), cache)
        for sig in graphs.signatures:
            shape = StepShape(4, sig.tokens, 6)
            graphs.buffers.stage(shape, [[7] * sig.tokens] * 3, lens, pages, PAGES, [0, 1, 2], [2, 0, 1])
            res = graphs._call(sig, graphs._inputs(sig, shape))
            graphs._write_outputs(sig, shape, res)
            static = graphs._static_result(sig, shape)
            assert torch.equal(static.logits, res.logits) and torch.equal(static.hidden, res.hidden)
            if sig.kind == "mtp" and not sig.reuse:
                got, want = static.selection, res.selection
                pairs = [(got.positions, want.positions), (got.valid, want.valid)] if kernels is None else [(got, want)]
                assert all(torch.equal(a, b) for a, b in pairs)
    finally:
        model.kernel_backend = "auto"
    assert [(s.kind, s.tokens, s.reuse) for s in graphs.signatures] == [
        ("target", 3, False), ("mtp", 1, False), ("mtp", 3, False), ("mtp", 1, True)]


def test_a_failing_compile_falls_back_to_eager_for_good(model, caplog):
    from inference.decode_compiler import StepCompiler

    def broken_backend(graph, example_inputs):
        raise RuntimeError("no C++ compiler here")

    graphs = _runner(model, "compile")
    graphs.compilers = {"target": StepCompiler(model.step_forward, backend=broken_backend)}
    prompts = _prompts([6, 10])
    with caplog.at_level("WARNING", logger="inference.decode_compiler"):
        got_tokens, got = _decode(graphs, model, prompts, 3)
    want_tokens, want = _decode(_runner(model, "eager"), model, prompts, 3)
    assert got_tokens == want_tokens and all(torch.equal(a, b) for a, b in zip(got, want))
    assert "no C++ compiler here" in graphs.compilers["target"].failure
    assert graphs.compilers["target"].calls == 0 and len(caplog.records) == 1  # one warning, then plain eager
