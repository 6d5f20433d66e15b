"""GLM-5.3-Flash prefix caching over KDA state: the engine's radix cache with state snapshots.
Sessions resume from the snapshot at the end of their last turn (on the device and after a
host-tier restore), shared prefixes get a snapshot and hit, preempted requests resume from
theirs; greedy outputs equal the model's own decoding alone throughout, and every state slot,
page and snapshot slot comes back."""

from __future__ import annotations

import random

import pytest
import torch

from inference.engine import Engine, EngineConfig, GenerateRequest, SamplingParams
from inference.glm5_next.loader import load_flash_model
from inference.glm5_next.random_checkpoint import write_flash_checkpoint

PS = 8


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory):
    return write_flash_checkpoint(tmp_path_factory.mktemp("flash-cache"), "flash-tiny", seed=23, dtype=torch.float32)


@pytest.fixture(scope="module")
def model(ckpt):
    return load_flash_model(ckpt)


def _engine(ckpt, **overrides) -> Engine:
    cfg = dict(dtype="float32", kv_budget_tokens=512, page_size=PS, state_snapshot_fraction=0.5)
    cfg.update(overrides)
    return Engine(ckpt, EngineConfig(**cfg))


def _req(prompt, n, session=None, rid=None) -> GenerateRequest:
    return GenerateRequest(prompt_ids=prompt, params=SamplingParams(temperature=0.0, max_tokens=n, ignore_eos=True),
                           session_id=session, request_id=rid)


def _tokens(seed: int, n: int) -> list[int]:
    return torch.randint(3, 500, (n,), generator=torch.Generator().manual_seed(seed)).tolist()


def _alone(model, prompt, n) -> list[int]:
    return model.generate(torch.tensor([prompt]), max_new_tokens=n)[0].tolist()


def test_session_turns_resume_from_snapshots_and_equal_the_model_alone(ckpt, model):
    # 5 snapshots (75 tokens' worth of KV each at this size): one per session and the shared prefix;
    # prefill in odd chunks that cut pages anywhere.
    eng = _engine(ckpt, kv_budget_tokens=1024, state_snapshot_fraction=0.4, chunk_size=5, max_batch_tokens=40)
    assert eng.stats()["state_snapshots"]["device_slots"] == 5
    system = _tokens(0, 21)  # shared by all three sessions: 2 whole pages + 5
    history = {s: system + _tokens(10 + s, 4 + 3 * s) for s in range(3)}
    for turn in range(3):
        results = eng.generate([_req(history[s], 5, session=f"s{s}") for s in range(3)])
        for s, r in enumerate(results):
            assert r.token_ids == _alone(model, history[s], 5), (turn, s)
            if turn > 0:  # everything the last turn computed is a hit: only the new text is computed
                assert r.usage.cached_tokens == previous[s]
            else:  # at most the system prompt's pages, where its first users took a snapshot
                assert r.usage.cached_tokens in (0, PS, 2 * PS)
        previous = {s: len(history[s]) + 5 - 1 for s in range(3)}
        history = {s: history[s] + results[s].token_ids + _tokens(100 * turn + s, 6) for s in range(3)}
    stats = eng.stats()
    snaps = stats["state_snapshots"]
    assert snaps["taken_shared"] >= 1 and snaps["resumed"] >= 6
    assert stats["hit_rate"] > 0.5
    # New sessions on the system prompt: each hits the deepest snapshot in it and, where the pages
    # go deeper, leaves one at their end for the next.
    for seed in (98, 99):
        late = eng.generate([_req(system + _tokens(seed, 3), 5)])[0]
        assert late.token_ids == _alone(model, system + _tokens(seed, 3), 5)
    assert late.usage.cached_tokens == 2 * PS


def test_hit_after_host_tier_restore_equals_the_model_alone(ckpt, model):
    # One device snapshot (75 tokens' worth of KV at this size) and 10 pages; the host holds more.
    eng = _engine(ckpt, kv_budget_tokens=160, host_budget_tokens=1024)
    assert eng.stats()["state_snapshots"]["device_slots"] == 1 and eng.num_device_pages == 10
    a1 = _tokens(1, 40)
    ra = eng.generate([_req(a1, 4, session="a")])[0]
    eng.generate([_req(_tokens(2, 40), 4, session="b")])  # b's pages and snapshot push a's to the host
    assert eng.stats()["host_cached_pages"] > 0 and eng.stats()["state_snapshots"]["host"] == 1
    a2 = a1 + ra.token_ids + _tokens(3, 4)
    r2 = eng.generate([_req(a2, 4, session="a")])[0]
    assert r2.token_ids == _alone(model, a2, 4)
    assert r2.usage.cached_tokens == len(a1) + 4 - 1 and r2.usage.cached_tokens_host > 0
    stats = eng.stats()
    assert stats["state_snapshots"]["resumed_from_host"] == 1 and stats["pages_restored"] > 0


def test_preemption_resumes_from_a_snapshot_and_matches(ckpt, model):
    prompts = [_tokens(30 + i, n) for i, n in enumerate([23, 14, 31, 9])]
    # 6 pages + 1 snapshot on the device: the victim's pages are evicted right after it leaves, so
    # they and its snapshot wait in the host tier (13 pages + 2 snapshots) until it comes back.
    eng = _engine(ckpt, kv_budget_tokens=16 * PS, host_budget_tokens=32 * PS, state_snapshot_fraction=0.6)
    assert eng.num_device_pages == 6 and eng.stats()["state_snapshots"]["device_slots"] == 1
    results = eng.generate([_req(p, 6) for p in prompts])
    assert [r.token_ids for r in results] == [_alone(model, p, 6) for p in prompts]
    stats = eng.stats()
    assert stats["preemptions"] > 0 and stats["state_snapshots"]["resumed"] > 0


def test_many_mixed_requests_return_every_slot_page_and_snapshot(ckpt):
    """1,000 short requests in 20 waves: 50 sessions on three shared prefixes, each wave's prompts
    extending the last wave's outputs, some aborted; snapshots spill to the host and come back."""
    eng = _engine(ckpt, kv_budget_tokens=8192, host_budget_tokens=2048, state_snapshot_fraction=0.6,
                  max_running=50, chunk_size=9, max_batch_tokens=4096)
    snaps = eng.stats()["state_snapshots"]
    assert (snaps["device_slots"], snaps["host_slots"]) == (65, 16)
    rng = random.Random(0)
    systems = [_tokens(500 + g, 11 + 5 * g) for g in range(3)]
    history = {s: systems[s % 3] + _tokens(600 + s, rng.randrange(1, 6)) for s in range(50)}
    finish = []
    for wave in range(20):
        handles = {s: eng.submit(_req(history[s], rng.randrange(1, 3), session=f"s{s}", rid=f"{wave}:{s}"))
                   for s in history}
        for s in rng.sample(sorted(history), 5):
            eng.abort(f"{wave}:{s}")
        for s, h in handles.items():
            r = h.result()
            finish.append(r.finish_reason)
            history[s] = history[s] + r.token_ids + _tokens(1000 * wave + s, rng.randrange(1, 4))
    assert len(finish) == 1000 and set(finish) == {"length", "abort"}
    stats = eng.stats()
    snaps = stats["state_snapshots"]
    assert stats["running"] == stats["waiting"] == 0 and stats["hit_rate"] > 0.5
    assert snaps["resumed"] > 500 and snaps["spilled"] > 0 and snaps["resumed_from_host"] > 0
    eng.clear_cache()
    stats = eng.stats()
    assert stats["free_pages"] == stats["total_pages"] and stats["host_free_pages"] == stats["host_pages"]
    states = eng.prefix_cache.states
    assert states.device.num_free == states.device.num_pages and states.host.num_free == states.host.num_pages
    eng.runner._reclaim()
    assert eng.runner.slots_in_use == 0
