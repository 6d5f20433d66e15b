"""The engine over an FP8 KV cache: every feature that moves pages (prefix hits at and inside page
boundaries, host-tier spill and restore, preemption) or adds a cache layer (MTP) copies the raw
FP8 bytes, so the output equals the same FP8 engine without the feature. Each cache row is
quantized on its own, so the FP8 engine is as deterministic as the model-dtype one."""

from __future__ import annotations

import pytest
import torch
from pydantic import ValidationError

from inference.engine import Engine, EngineConfig, GenerateRequest, SamplingParams

from .conftest import make_prompt

PS = 16
PROMPTS = [make_prompt(i, n) for i, n in enumerate([40, 9, 23, 57, 16, 33, 70, 5])]
N_NEW = 6


def engine(ckpt, **overrides) -> Engine:
    cfg = dict(dtype="float32", kv_budget_tokens=2048, page_size=PS, latent_norm_eps=1e-6, kv_cache_dtype="fp8")
    cfg.update(overrides)
    return Engine(ckpt, EngineConfig(**cfg))


def greedy(prompt, n=N_NEW) -> GenerateRequest:
    return GenerateRequest(prompt_ids=prompt, params=SamplingParams(temperature=0.0, max_tokens=n, ignore_eos=True))


@pytest.fixture(scope="module")
def plain(engine_checkpoint):
    """The FP8 engine with no prefix cache and room for everything: the oracle of this file."""
    eng = engine(engine_checkpoint, enable_prefix_cache=False)
    memo = {}

    def run(prompt, n=N_NEW):
        key = (tuple(prompt), n)
        if key not in memo:
            memo[key] = eng.generate([greedy(prompt, n)])[0].token_ids
        return memo[key]

    return run


def test_fp8_engine_stores_bytes_and_sizes_pages_by_them(engine_checkpoint):
    auto = engine(engine_checkpoint, kv_cache_dtype="auto", kv_budget_bytes=1 << 20)
    fp8 = engine(engine_checkpoint, kv_budget_bytes=1 << 20, host_budget_tokens=4 * PS)
    assert fp8.kv_cache.latent[0].dtype == torch.uint8 and fp8.host.host_cache.latent[0].dtype == torch.uint8
    assert fp8.cache_bytes_per_token == fp8.kv_cache.bytes_per_token() < auto.cache_bytes_per_token
    assert fp8.num_device_pages > auto.num_device_pages  # the same byte budget holds more tokens


def test_prefix_hits_at_and_inside_page_boundaries(engine_checkpoint, plain):
    eng = engine(engine_checkpoint)
    base = PROMPTS[6]  # 70 tokens
    eng.generate([greedy(base)])
    cases = [base[:32] + make_prompt(100, 20), base[:40] + make_prompt(101, 20), list(base)]
    results = eng.generate([greedy(p) for p in cases])
    # 2 whole pages; 2 pages + 8 tokens of a copied partial page; 4 pages + 5 copied tokens.
    assert [r.usage.cached_tokens for r in results] == [32, 40, 69]
    for p, r in zip(cases, results):
        assert r.token_ids == plain(p)


def test_restore_from_host_tier(engine_checkpoint, plain):
    eng = engine(engine_checkpoint, kv_budget_tokens=5 * PS, host_budget_tokens=32 * PS)
    a, b, c = PROMPTS[3], PROMPTS[5], PROMPTS[0]
    for p in (a, b, c):
        eng.generate([greedy(p)])
    assert eng.stats()["pages_spilled"] > 0
    (again,) = eng.generate([greedy(a)])
    assert again.usage.cached_tokens_host == 56 and again.usage.cached_tokens_device == 0
    assert again.token_ids == plain(a)
    assert eng.stats()["pages_restored"] >= 3


@pytest.mark.parametrize("prefix_cache", [False, True])
def test_preemption_under_tiny_kv_budget(engine_checkpoint, plain, prefix_cache):
    eng = engine(engine_checkpoint, kv_budget_tokens=6 * PS, enable_prefix_cache=prefix_cache)
    prompts = [PROMPTS[0], PROMPTS[2], PROMPTS[5], PROMPTS[1]]
    results = eng.generate([greedy(p, 12) for p in prompts])
    assert eng.stats()["preemptions"] > 0
    for p, r in zip(prompts, results):
        assert r.token_ids == plain(p, 12)


def test_mtp_speculation_keeps_greedy_output(engine_checkpoint, plain):
    eng = engine(engine_checkpoint, num_speculative_tokens=2)
    assert len(eng.kv_cache.latent) == eng.model_config.num_hidden_layers + 1  # MTP's own FP8 layer
    prompts = [PROMPTS[0], PROMPTS[3], PROMPTS[6]]
    results = eng.generate([greedy(p, 12) for p in prompts])
    for p, r in zip(prompts, results):
        assert r.token_ids == plain(p, 12)
        assert r.usage.spec_draft_tokens > 0


def test_bad_kv_cache_dtype_names_the_field():
    with pytest.raises(ValidationError, match="kv_cache_dtype must be 'auto'.*'fp8'.*got 'int4'"):
        EngineConfig(kv_budget_tokens=64, kv_cache_dtype="int4")
