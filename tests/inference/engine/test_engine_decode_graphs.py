"""The engine with decode graphs (torch.compile on a CPU) generates exactly what it generates
eagerly: batches of every bucket, prefix hits, MTP verification and draft passes, including
drafts that reuse the first draft's selection (index_share_for_mtp_iteration)."""

from __future__ import annotations

import pytest

from inference.engine import Engine, EngineConfig, GenerateRequest, SamplingParams

from .conftest import make_prompt

PS = 16


@pytest.fixture(scope="module")
def share_checkpoint(tmp_path_factory):
    from inference.random_checkpoint import write_random_checkpoint

    return write_random_checkpoint(tmp_path_factory.mktemp("ckpt-share"), preset="tiny", seed=0,
                                   overrides=dict(index_share_for_mtp_iteration=True))


def _engine(ckpt, **overrides) -> Engine:
    cfg = dict(dtype="float32", device="cpu", kv_budget_tokens=2048, page_size=PS, latent_norm_eps=1e-6,
               max_running=8, graph_max_batch=4)
    cfg.update(overrides)
    return Engine(ckpt, EngineConfig(**cfg))


def _greedy(prompt, n) -> GenerateRequest:
    return GenerateRequest(prompt_ids=prompt, params=SamplingParams(temperature=0.0, max_tokens=n, ignore_eos=True))


def _waves(eng: Engine) -> list:
    """A first request, then waves of 1, 2, 3 and 4 concurrent ones reusing its prefix at and
    inside page boundaries (plus fresh prompts), so steps of every batch bucket run."""
    base = make_prompt(900, 70)
    first = eng.generate([_greedy(base, 6)])
    waves = [[base[:32] + make_prompt(901, 9)],
             [base[:40] + make_prompt(902, 20), make_prompt(903, 5)],
             [list(base), make_prompt(904, 30), base[:20] + make_prompt(905, 3)],
             [make_prompt(906 + i, 7 + 11 * i) for i in range(4)]]  # fmt: skip
    return first + [r for wave in waves for r in eng.generate([_greedy(p, 9) for p in wave])]


@pytest.mark.parametrize("k", [0, 2])
def test_graphs_generate_what_eager_steps_generate(share_checkpoint, k):
    eager = _waves(_engine(share_checkpoint, num_speculative_tokens=k))
    eng = _engine(share_checkpoint, num_speculative_tokens=k, decode_graphs=True)
    graphs = eng.runner.graphs
    got = _waves(eng)
    assert [r.token_ids for r in got] == [r.token_ids for r in eager]
    assert sum(r.usage.cached_tokens for r in got) >= 32 + 40 + 69  # the prefix hits happened
    assert all(c.failure is None for c in graphs.compilers.values())
    assert graphs.compilers["target"].calls > 2 + 8  # steps after the start-up ones went through the graph
    if k:
        assert graphs.steps["mtp"] > 0 and graphs.compilers["mtp"].calls > 0
        assert sum(r.usage.spec_draft_tokens for r in got) > 0
        assert {s.reuse for s in graphs.signatures} == {False, True}  # drafts 2..k reuse a selection
    else:  # overlap scheduling (the CUDA default) on the same graphs: future ids resolved in the
        # staged buffers (and, for batches of one, which run eagerly here, in the general batch)
        from inference.engine.overlap import OverlapScheduler

        eng.clear_cache()
        eng.overlap = OverlapScheduler(eng)
        before = graphs.compilers["target"].calls
        assert [r.token_ids for r in _waves(eng)] == [r.token_ids for r in eager]
        assert eng.overlap.steps["chained"] > 10 and graphs.compilers["target"].calls > before


def test_graph_settings_are_validated_at_the_edge():
    with pytest.raises(ValueError, match="contradict"):
        EngineConfig(kv_budget_tokens=64, compile_decode=True, decode_graphs=False)
    with pytest.raises(ValueError, match="graph_max_batch"):
        EngineConfig(kv_budget_tokens=64, graph_max_batch=0)
    assert EngineConfig(kv_budget_tokens=64, device="cuda").resolved_decode_graphs()
    assert not EngineConfig(kv_budget_tokens=64).resolved_decode_graphs()  # CPU: opt-in (compiling costs)
    assert EngineConfig(kv_budget_tokens=64, compile_decode=True).resolved_decode_graphs()  # the earlier name
    gloo = EngineConfig(kv_budget_tokens=64, device="cuda", parallel=dict(tensor_parallel_size=2, backend="gloo"))
    assert not gloo.resolved_decode_graphs()  # gloo collectives cannot be captured
    dp = dict(tensor_parallel_size=2, attention_dp=True, backend="nccl")
    assert not EngineConfig(kv_budget_tokens=64, device="cuda", parallel=dp).resolved_decode_graphs()
    with pytest.raises(ValueError, match="attention_dp"):  # asked for by name: refused, not dropped silently
        EngineConfig(kv_budget_tokens=64, device="cuda", decode_graphs=True, parallel=dp)
