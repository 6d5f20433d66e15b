"""Greedy output equals transformers `generate` on the same random checkpoint (fp32), under every
engine feature that could change it: batching, staggered arrivals, prefix hits at and inside page
boundaries, host-tier restore, preemption, chunked prefill, MTP speculation."""

from __future__ import annotations

import pytest

from inference.engine import Engine, EngineConfig, GenerateRequest, SamplingParams

from .conftest import make_prompt

PS = 16


def engine(ckpt, **overrides) -> Engine:
    cfg = dict(dtype="float32", device="cpu", kv_budget_tokens=2048, page_size=PS, latent_norm_eps=1e-6)
    cfg.update(overrides)
    return Engine(ckpt, EngineConfig(**cfg))


def greedy(prompt, n, **kw) -> GenerateRequest:
    return GenerateRequest(prompt_ids=prompt, params=SamplingParams(temperature=0.0, max_tokens=n, ignore_eos=True), **kw)


PROMPTS = [make_prompt(i, n) for i, n in enumerate([40, 9, 23, 57, 16, 33, 70, 5])]
N_NEW = 6


def test_single_request_matches_transformers(engine_checkpoint, hf_greedy):
    eng = engine(engine_checkpoint)
    (res,) = eng.generate([greedy(PROMPTS[0], 12)])
    assert res.token_ids == hf_greedy(tuple(PROMPTS[0]), 12)
    assert res.finish_reason == "length" and res.usage.completion_tokens == 12


def test_decode_graphs_match_transformers(engine_checkpoint, hf_greedy):
    """EngineConfig(decode_graphs=True) on a CPU: decode steps through torch.compile (built at
    start-up), three sequences padded to the batch bucket of four."""
    eng = engine(engine_checkpoint, decode_graphs=True, graph_max_batch=4)
    graphs = eng.runner.graphs
    assert graphs.mode == "compile" and graphs.compilers["target"].calls == 2  # built at start-up
    assert eng.allocator.num_free == eng.num_device_pages  # the padding rows' page is not the allocator's
    prompts = PROMPTS[:3]
    results = eng.generate([greedy(p, 12) for p in prompts])
    for p, r in zip(prompts, results):
        assert r.token_ids == hf_greedy(tuple(p), 12)
    assert graphs.compilers["target"].calls == 2 + 11 and graphs.compilers["target"].failure is None


def test_eight_staggered_requests_match_transformers(engine_checkpoint, hf_greedy):
    eng = engine(engine_checkpoint)
    handles = []
    for i, prompt in enumerate(PROMPTS):
        handles.append(eng.submit(greedy(prompt, N_NEW)))
        if i % 2:
            eng.step()  # later requests arrive while earlier ones are prefilling/decoding
    for prompt, h in zip(PROMPTS, handles):
        assert h.result().token_ids == hf_greedy(tuple(prompt), N_NEW)


def test_prefix_hits_at_and_inside_page_boundaries(engine_checkpoint, hf_greedy):
    eng = engine(engine_checkpoint)
    base = PROMPTS[6]  # 70 tokens
    eng.generate([greedy(base, N_NEW)])
    cases = [base[:32] + make_prompt(100, 20), base[:40] + make_prompt(101, 20), list(base)]
    results = eng.generate([greedy(p, N_NEW) for p in cases])
    # 32 shared tokens = 2 whole pages; 40 shared = 2 whole pages + the first 8 tokens of the
    # third (copied: the request writes its own tokens after them); identical prompt: 4 whole
    # pages + 5 tokens from the first request's partial page (copied), since the last prompt
    # token must be computed.
    assert [r.usage.cached_tokens for r in results] == [32, 40, 69]
    for p, r in zip(cases, results):
        assert r.token_ids == hf_greedy(tuple(p), N_NEW)


def test_restore_from_host_tier(engine_checkpoint, hf_greedy):
    # 5 device pages: each request needs most of them, so the previous prompts go to the host.
    eng = engine(engine_checkpoint, kv_budget_tokens=5 * PS, host_budget_tokens=32 * PS)
    a, b, c = PROMPTS[3], PROMPTS[5], PROMPTS[0]
    for p in (a, b, c):
        eng.generate([greedy(p, N_NEW)])
    assert eng.stats()["pages_spilled"] > 0
    (again,) = eng.generate([greedy(a, N_NEW)])
    # 3 whole pages and 8 tokens of the first run's partial last page, all back from the host.
    assert again.usage.cached_tokens_host == 56 and again.usage.cached_tokens_device == 0
    assert again.token_ids == hf_greedy(tuple(a), N_NEW)
    assert eng.stats()["pages_restored"] >= 3


@pytest.mark.parametrize("prefix_cache", [False, True])
def test_preemption_under_tiny_kv_budget(engine_checkpoint, hf_greedy, prefix_cache):
    # With the prefix cache, a preempted request resumes from its own cached pages and its
    # partly filled last page (copied back), whatever survived the pressure.
    eng = engine(engine_checkpoint, kv_budget_tokens=6 * PS, enable_prefix_cache=prefix_cache)
    prompts = [PROMPTS[0], PROMPTS[2], PROMPTS[5], PROMPTS[1]]
    results = eng.generate([greedy(p, 12) for p in prompts])
    assert eng.stats()["preemptions"] > 0
    for p, r in zip(prompts, results):
        assert r.token_ids == hf_greedy(tuple(p), 12)
    eng.clear_cache()
    assert eng.stats()["free_pages"] == 6


def test_chunked_prefill(engine_checkpoint, hf_greedy):
    eng = engine(engine_checkpoint, chunk_size=7, max_batch_tokens=12)
    prompts = [PROMPTS[6], PROMPTS[3], PROMPTS[2]]
    results = eng.generate([greedy(p, N_NEW) for p in prompts])
    for p, r in zip(prompts, results):
        assert r.token_ids == hf_greedy(tuple(p), N_NEW)


@pytest.mark.parametrize("k", [1, 3])
def test_mtp_speculation_keeps_greedy_output(engine_checkpoint, hf_greedy, k):
    eng = engine(engine_checkpoint, num_speculative_tokens=k)
    prompts = [PROMPTS[0], PROMPTS[3], PROMPTS[6]]
    results = eng.generate([greedy(p, 12) for p in prompts])
    for p, r in zip(prompts, results):
        assert r.token_ids == hf_greedy(tuple(p), 12)
        assert r.usage.spec_draft_tokens > 0
        assert 0 <= r.usage.spec_accepted_tokens <= r.usage.spec_draft_tokens


def test_cache_pressure_never_changes_greedy_output(engine_checkpoint):
    """Shared prefixes, multi-turn sessions, tails, host spills and restores, preemption,
    chunking and speculation all at once, against a plain engine with room for everything."""
    import random

    rng = random.Random(3)
    system = make_prompt(500, 37)
    requests, history = [], {}
    for i in range(36):
        sid = f"s{rng.randrange(6)}"
        prompt = history.get(sid, system) + make_prompt(600 + i, rng.randrange(1, 12))
        if len(prompt) > 90:
            prompt = system + make_prompt(700 + i, 5)
        history[sid] = prompt + make_prompt(800 + i, 3)  # the next turn extends this one
        requests.append(greedy(prompt, rng.randrange(1, 6), session_id=sid))
    pressured = engine(engine_checkpoint, kv_budget_tokens=9 * PS, host_budget_tokens=10 * PS, chunk_size=13,
                       max_batch_tokens=40, num_speculative_tokens=2)
    plain = engine(engine_checkpoint, enable_prefix_cache=False)
    got = []
    for k in range(0, len(requests), 4):  # waves of 4 concurrent requests
        got += pressured.generate(requests[k:k + 4])
    want = plain.generate(requests)
    assert [r.token_ids for r in got] == [r.token_ids for r in want]
    s = pressured.stats()
    assert s["pages_restored"] > 0 and s["preemptions"] > 0 and s["hit_rate"] > 0.3
