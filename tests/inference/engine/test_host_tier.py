"""Host tier: partial last pages spill and come back like whole pages (usage, parity, capacity),
and the page copies themselves (the run-coalescing code the CUDA path shares)."""

from __future__ import annotations

import random

import torch

from inference.engine import Engine, EngineConfig, GenerateRequest, SamplingParams
from inference.engine.host_tier import HostTier, copy_pages, page_runs

from .conftest import make_prompt

PS = 16


def engine(ckpt, **overrides) -> Engine:
    cfg = dict(dtype="float32", kv_budget_tokens=2048, page_size=PS, latent_norm_eps=1e-6)
    cfg.update(overrides)
    return Engine(ckpt, EngineConfig(**cfg))


def greedy(prompt, n, **kw) -> GenerateRequest:
    return GenerateRequest(prompt_ids=prompt, params=SamplingParams(temperature=0.0, max_tokens=n, ignore_eos=True), **kw)


def test_page_runs_coalesce_consecutive_ids_on_both_sides():
    assert list(page_runs([3, 4, 5, 9, 10, 2], [0, 1, 2, 3, 7, 8])) == [(3, 0, 3), (9, 3, 1), (10, 7, 1), (2, 8, 1)]
    assert list(page_runs([], [])) == []


def test_spill_and_load_copy_every_layer_exactly(engine_checkpoint):
    eng = engine(engine_checkpoint, kv_budget_tokens=8 * PS, host_budget_tokens=6 * PS)
    dev, host = eng.kv_cache, eng.host.host_cache
    g = torch.Generator().manual_seed(0)
    for t in [*dev.latent, *dev.indexer.values()]:
        t.copy_(torch.randn(t.shape, generator=g))
    want = dev.read_pages(torch.tensor([5, 6, 2]))
    tier = HostTier(6, dev, host)
    host_pages = tier.spill([5, 6, 2])
    tier.load(host_pages, [0, 1, 7])
    tier.fence()  # CPU: nothing to wait for
    got = dev.read_pages(torch.tensor([0, 1, 7]))
    for a, b in zip([*want.latent, *want.indexer.values()], [*got.latent, *got.indexer.values()]):
        assert torch.equal(a, b)
    assert tier.pages_spilled == tier.pages_restored == 3 and tier.num_free == 3
    # The same helper copies pages within one cache (the engine's device-to-device tail copy).
    copy_pages(dev, [0], dev, [4], non_blocking=False)
    assert torch.equal(dev.latent[0][4], want.latent[0][0])


def test_session_gets_its_partial_last_page_back_from_the_host(engine_checkpoint, hf_greedy):
    # 8 device pages and no retention: other sessions push the agent's pages to the host.
    eng = engine(engine_checkpoint, kv_budget_tokens=8 * PS, host_budget_tokens=32 * PS, session_ttl_s=0.0)
    prompt = make_prompt(2, 37)
    (t1,) = eng.generate([greedy(prompt, 8, session_id="agent")])
    # 37 + 8 tokens, 44 with KV (the last sampled one is never fed): 2 whole pages + a 12-token tail.
    for i in range(3):
        eng.generate([greedy(make_prompt(40 + i, 50), 4, session_id=f"other{i}")])
    s = eng.stats()
    assert s["host_tail_pages"] >= 1 and s["device_cached_pages"] <= 8

    # A request that diverges inside the agent's partial page: mid-page hit, from the host.
    history = prompt + t1.token_ids
    fork = history[:39] + make_prompt(3, 10)
    (f,) = eng.generate([greedy(fork, 4, session_id="fork")])
    assert (f.usage.cached_tokens_host, f.usage.cached_tokens_device) == (39, 0)

    for i in range(3):  # pressure again: the agent's path goes back to the host
        eng.generate([greedy(make_prompt(50 + i, 50), 4, session_id=f"other{i}")])
    turn2 = history + make_prompt(4, 20)
    (t2,) = eng.generate([greedy(turn2, 6, session_id="agent")])
    # Every token with KV is host-cached. Before partial pages were spilled, only the 32 tokens
    # of whole pages were, and the 12 tokens of the tail were recomputed.
    assert (t2.usage.cached_tokens_host, t2.usage.cached_tokens_device) == (44, 0)

    assert t1.token_ids == hf_greedy(tuple(prompt), 8)
    assert f.token_ids == hf_greedy(tuple(fork), 4)
    assert t2.token_ids == hf_greedy(tuple(turn2), 6)
    roomy = engine(engine_checkpoint)  # the same turns with nothing evicted
    assert [r.token_ids for r in roomy.generate([greedy(fork, 4)]) + roomy.generate([greedy(turn2, 6)])] \
        == [f.token_ids, t2.token_ids]


def test_partial_pages_under_a_full_host_tier_leak_nothing(engine_checkpoint):
    """Multi-turn sessions ending mid-page, a host tier far smaller than what is spilled (so it
    drops tails and whole pages for room), aborts and speculation: every page of both tiers
    is accounted for at every step and free again at the end."""
    eng = engine(engine_checkpoint, kv_budget_tokens=12 * PS, host_budget_tokens=5 * PS, session_ttl_s=3.0,
                 chunk_size=24, max_batch_tokens=64, num_speculative_tokens=1)
    clock = [0.0]
    eng.prefix_cache.clock = lambda: clock[0]
    rng = random.Random(7)
    history: dict[str, list[int]] = {}
    handles, host_tails_seen = [], 0
    for i in range(90):
        sid = f"s{rng.randrange(6)}"
        prompt = history.get(sid, make_prompt(900, 9)) + make_prompt(1000 + i, rng.randrange(1, 14))
        if len(prompt) > 100:
            prompt = prompt[-rng.randrange(5, 40):]
        handles.append((sid, prompt, eng.submit(greedy(prompt, rng.randrange(1, 7), session_id=sid, request_id=f"r{i}"))))
        if rng.random() < 0.08:
            eng.abort(f"r{rng.randrange(i + 1)}")
        for _ in range(rng.randrange(0, 4)):
            eng.step()
            clock[0] += 1.0
            s = eng.stats()
            assert s["host_free_pages"] + s["host_cached_pages"] == s["host_pages"]
            host_tails_seen = max(host_tails_seen, s["host_tail_pages"])
        res = handles[-1][2]
        if res.done:
            history[sid] = prompt + res.result().token_ids
    for sid, prompt, h in handles:
        r = h.result()
        if r.finish_reason != "abort":
            history[sid] = prompt + r.token_ids
    s = eng.stats()
    assert s["running"] == s["waiting"] == 0
    assert s["free_pages"] + s["device_cached_pages"] == s["total_pages"]
    assert s["host_free_pages"] + s["host_cached_pages"] == s["host_pages"]
    assert s["pages_spilled"] > s["host_pages"] and s["host_pages_dropped"] > 0 and s["pages_restored"] > 0
    assert host_tails_seen > 0
    eng.clear_cache()
    s = eng.stats()
    assert s["free_pages"] == s["total_pages"] and s["host_free_pages"] == s["host_pages"]


def test_mid_page_hit_on_a_spilled_page_copies_it_from_the_host(engine_checkpoint, hf_greedy):
    eng = engine(engine_checkpoint, kv_budget_tokens=6 * PS, host_budget_tokens=32 * PS, session_ttl_s=0.0)
    base = make_prompt(60, 70)
    eng.generate([greedy(base, 2)])
    for i in range(2):
        eng.generate([greedy(make_prompt(61 + i, 70), 2)])
    fork = base[:40] + make_prompt(64, 12)  # 2 whole pages + 8 tokens of the third, all on the host
    (res,) = eng.generate([greedy(fork, 5)])
    assert (res.usage.cached_tokens_host, res.usage.cached_tokens_device) == (40, 0)
    assert res.token_ids == hf_greedy(tuple(fork), 5)
