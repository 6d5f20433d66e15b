"""Engine behaviour beyond parity: cached-token accounting, session retention and TTL, shared
prefixes, aborts and leaks, bad requests, streaming from the background loop, stop strings,
seeds, logprobs."""

from __future__ import annotations

import pytest

from inference.engine import Engine, EngineConfig, EngineError, GenerateRequest, SamplingParams

from .conftest import make_prompt
from .mixed_requests import assert_pool_drained, submit_mixed_requests

PS = 16


class FakeClock:
    def __init__(self):
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def engine(ckpt, clock=None, detokenize=None, **overrides) -> Engine:
    cfg = dict(dtype="float32", kv_budget_tokens=2048, page_size=PS, latent_norm_eps=1e-6)
    cfg.update(overrides)
    kwargs = {"clock": clock} if clock else {}
    return Engine(ckpt, EngineConfig(**cfg), detokenize=detokenize, **kwargs)


def req(prompt, n=4, **kw) -> GenerateRequest:
    params = kw.pop("params", None) or SamplingParams(temperature=0.0, max_tokens=n, ignore_eos=True)
    return GenerateRequest(prompt_ids=prompt, params=params, **kw)


def test_second_identical_request_reports_everything_but_the_last_token(engine_checkpoint):
    eng = engine(engine_checkpoint)
    prompt = make_prompt(1, 75)
    first, second = eng.generate([req(prompt)]), eng.generate([req(prompt)])
    assert first[0].usage.cached_tokens == 0
    # 4 whole pages + 10 tokens of the first request's partial page (copied, then written on);
    # the last prompt token is always computed, its logits pick the first output token.
    assert second[0].usage.cached_tokens == 74 == second[0].usage.cached_tokens_device
    assert first[0].token_ids == second[0].token_ids


def test_identical_prompt_shorter_than_a_page_hits_the_cache(engine_checkpoint, hf_greedy):
    eng = engine(engine_checkpoint)
    prompt = make_prompt(11, 10)
    first, second = eng.generate([req(prompt)]), eng.generate([req(prompt)])
    assert first[0].usage.cached_tokens == 0
    assert second[0].usage.cached_tokens == len(prompt) - 1 == second[0].usage.cached_tokens_device
    assert first[0].token_ids == second[0].token_ids == hf_greedy(tuple(prompt), 4)


def test_session_next_turn_reports_previous_prompt_and_output_cached(engine_checkpoint):
    eng = engine(engine_checkpoint)
    prompt = make_prompt(2, 37)
    (turn1,) = eng.generate([req(prompt, 8, session_id="agent")])
    # 37 + 8 tokens; all but the last sampled one (never fed to the model) have KV: 2 whole
    # pages and 12 tokens of a partial page.
    turn2_prompt = prompt + turn1.token_ids + make_prompt(3, 20)
    (turn2,) = eng.generate([req(turn2_prompt, 4, session_id="agent")])
    assert turn2.usage.cached_tokens == len(prompt) + len(turn1.token_ids) - 1 == 44


def _fill(eng, seed, n_prompts, length=40):
    for i in range(n_prompts):
        eng.generate([req(make_prompt(seed + i, length), 2)])


def test_session_retained_until_ttl_expires(engine_checkpoint):
    clock = FakeClock()
    eng = engine(engine_checkpoint, clock=clock, kv_budget_tokens=12 * PS, session_ttl_s=30.0)
    history = make_prompt(10, 40)
    (t1,) = eng.generate([req(history, 9, session_id="s")])
    nxt = history + t1.token_ids + make_prompt(11, 10)
    _fill(eng, 100, 6)  # the tool runs; other traffic churns the cache
    (t2,) = eng.generate([req(nxt, 2, session_id="s")])
    assert t2.usage.cached_tokens == 48, "retained session was evicted"
    nxt2 = nxt + t2.token_ids + make_prompt(12, 10)
    clock.t += 31.0  # the tool took longer than the TTL
    _fill(eng, 200, 6)
    (t3,) = eng.generate([req(nxt2, 2, session_id="s")])
    assert t3.usage.cached_tokens == 0, "expired session should have been evicted by LRU"


def test_plain_lru_loses_the_session_that_retention_keeps(engine_checkpoint):
    eng = engine(engine_checkpoint, kv_budget_tokens=12 * PS, session_ttl_s=0.0)
    history = make_prompt(10, 40)
    (t1,) = eng.generate([req(history, 9, session_id="s")])
    _fill(eng, 100, 6)
    (t2,) = eng.generate([req(history + t1.token_ids + make_prompt(11, 10), 2, session_id="s")])
    assert t2.usage.cached_tokens == 0


def test_shared_prefix_stays_resident(engine_checkpoint):
    clock = FakeClock()
    eng = engine(engine_checkpoint, clock=clock, kv_budget_tokens=16 * PS, session_ttl_s=5.0)
    system = make_prompt(50, 32)  # two whole pages shared by every session
    for turn in range(12):
        (res,) = eng.generate([req(system + make_prompt(300 + turn, 40), 2, session_id=f"s{turn % 4}")])
        if turn:
            assert res.usage.cached_tokens >= 32
        clock.t += 10.0  # retention of every session has lapsed by the next request


def test_abort_frees_everything(engine_checkpoint):
    eng = engine(engine_checkpoint, kv_budget_tokens=32 * PS)
    total = eng.stats()["total_pages"]
    long = eng.submit(req(make_prompt(7, 60), 200, request_id="long"))
    waiting = eng.submit(req(make_prompt(8, 30), 5, request_id="other"))
    for _ in range(3):
        eng.step()
    eng.abort("long")
    res = long.result()
    assert res.finish_reason == "abort" and len(res.token_ids) < 200
    assert waiting.result().finish_reason == "length"
    s = eng.stats()
    assert s["running"] == 0 and s["free_pages"] + s["device_cached_pages"] == total
    eng.clear_cache()
    assert eng.stats()["free_pages"] == total


def test_thousand_mixed_requests_leak_nothing(engine_checkpoint):
    clock = FakeClock()
    eng = engine(engine_checkpoint, clock=clock, kv_budget_tokens=40 * PS, host_budget_tokens=24 * PS,
                 max_running=48, chunk_size=32, max_batch_tokens=256, num_speculative_tokens=1)
    results = [h.result() for h in submit_mixed_requests(eng, clock)]
    assert {r.finish_reason for r in results} <= {"stop", "length", "abort"}
    assert_pool_drained(eng.stats())
    eng.clear_cache()
    s = eng.stats()
    assert s["free_pages"] == s["total_pages"] and s["host_free_pages"] == s["host_pages"]


@pytest.mark.parametrize(
    "bad, field",
    [
        (dict(prompt_ids=[]), "prompt_ids"),
        (dict(prompt_ids=[5, 10**6]), "prompt_ids"),
        (dict(prompt_ids=[-1]), "prompt_ids"),
        (dict(prompt_ids=[5], params=SamplingParams(max_tokens=0)), "params.max_tokens"),
        (dict(prompt_ids=[5] * 4096), "prompt_ids"),
        (dict(prompt_ids=[5], params=SamplingParams(logit_bias={10**6: 1.0})), "params.logit_bias"),
    ],
)
def test_bad_requests_are_rejected_without_disturbing_others(engine_checkpoint, bad, field):
    eng = engine(engine_checkpoint, kv_budget_tokens=8192)
    good = make_prompt(4, 20)
    (alone,) = eng.generate([req(good, 5)])
    handle = eng.submit(req(good, 5))
    with pytest.raises(EngineError) as err:
        eng.submit(GenerateRequest(**bad))
    assert err.value.field == field and field in str(err.value)
    assert handle.result().token_ids == alone.token_ids


def test_streaming_from_background_loop(engine_checkpoint):
    with engine(engine_checkpoint) as eng:
        handles = [eng.submit(req(make_prompt(20 + i, 10 + 7 * i), 6)) for i in range(3)]
        for h in handles:
            deltas = list(h)
            assert deltas[-1].finish_reason == "length" and deltas[-1].usage.completion_tokens == 6
            assert sum((d.token_ids for d in deltas), []) == h.result().token_ids
        long = eng.submit(req(make_prompt(30, 10), 500, request_id="bg-long"))
        first = next(iter(long))
        assert first.token_ids
        eng.abort("bg-long")
        assert long.result().finish_reason == "abort"


def test_stop_strings_and_stop_tokens(engine_checkpoint):
    eng = engine(engine_checkpoint, detokenize=lambda ids: "".join(f"<{i}>" for i in ids))
    prompt = make_prompt(5, 30)
    (free,) = eng.generate([req(prompt, 8)])
    target = free.token_ids[3]
    (by_string,) = eng.generate([req(prompt, params=SamplingParams(temperature=0, max_tokens=8, stop=[f"<{target}>"], ignore_eos=True))])
    assert by_string.finish_reason == "stop" and by_string.stop_reason == f"<{target}>"
    assert by_string.token_ids == free.token_ids[: free.token_ids.index(target) + 1]
    (by_id,) = eng.generate([req(prompt, params=SamplingParams(temperature=0, max_tokens=8, stop_token_ids=[target], ignore_eos=True))])
    assert by_id.token_ids == by_string.token_ids and by_id.stop_reason == target


def test_seeded_sampling_independent_of_batch_and_speculation(engine_checkpoint):
    params = SamplingParams(temperature=0.9, top_p=0.9, top_k=50, seed=1234, max_tokens=10, ignore_eos=True)
    prompt = make_prompt(6, 25)
    (alone,) = engine(engine_checkpoint).generate([req(prompt, params=params)])
    others = [req(make_prompt(40 + i, 15), params=SamplingParams(temperature=1.0, max_tokens=10)) for i in range(3)]
    batched = engine(engine_checkpoint, num_speculative_tokens=2).generate(others[:2] + [req(prompt, params=params)] + others[2:])
    assert batched[2].token_ids == alone.token_ids


def test_logprobs(engine_checkpoint):
    eng = engine(engine_checkpoint)
    (res,) = eng.generate([req(make_prompt(9, 12), params=SamplingParams(temperature=0, max_tokens=4, logprobs=3, ignore_eos=True))])
    assert len(res.logprobs) == 4
    for tok, lp in zip(res.token_ids, res.logprobs):
        assert lp.token_id == tok and lp.logprob <= 0 and len(lp.top) == 3
        assert lp.top[0][0] == tok  # greedy: the chosen token is the most likely one


def test_generation_stops_at_the_kv_budget(engine_checkpoint):
    eng = engine(engine_checkpoint, kv_budget_tokens=4 * PS)
    (res,) = eng.generate([req(make_prompt(13, 40), 1000)])
    assert res.finish_reason == "length" and len(res.token_ids) == 4 * PS - 40
    with pytest.raises(EngineError, match="KV budget"):
        eng.submit(req(make_prompt(14, 4 * PS), 1))


def test_prefix_is_shared_while_its_first_request_still_runs(engine_checkpoint, hf_greedy):
    eng = engine(engine_checkpoint, chunk_size=16, max_batch_tokens=16)
    prompt = make_prompt(15, 70)
    first = eng.submit(req(prompt, 6))
    second = eng.submit(req(prompt[:64] + make_prompt(16, 5), 6))
    r1, r2 = first.result(), second.result()
    assert r2.usage.cached_tokens == 64  # admitted while the first was decoding
    assert r1.token_ids == hf_greedy(tuple(prompt), 6)
    assert r2.token_ids == hf_greedy(tuple(prompt[:64] + make_prompt(16, 5)), 6)
    s = eng.stats()
    assert s["free_pages"] + s["device_cached_pages"] == s["total_pages"]


def test_shutdown_aborts_what_is_left(engine_checkpoint):
    eng = engine(engine_checkpoint).start()
    handle = eng.submit(req(make_prompt(17, 20), 10_000, request_id="endless"))
    next(iter(handle))
    eng.shutdown()
    assert handle.result().finish_reason == "abort"
    s = eng.stats()
    assert s["running"] == s["waiting"] == 0 and s["free_pages"] + s["device_cached_pages"] == s["total_pages"]


def test_parallel_sessions_on_one_system_prompt_compute_it_once(engine_checkpoint, hf_greedy):
    eng = engine(engine_checkpoint)
    system = make_prompt(18, 48)
    prompts = [system + make_prompt(19 + i, 7) for i in range(4)]
    results = eng.generate([req(p, 3, session_id=f"p{i}") for i, p in enumerate(prompts)])
    assert [r.usage.cached_tokens for r in results] == [0, 48, 48, 48]
    for p, r in zip(prompts, results):
        assert r.token_ids == hf_greedy(tuple(p), 3)


def test_mtp_layer_is_loaded_only_when_speculating(engine_checkpoint):
    plain = engine(engine_checkpoint)
    spec = engine(engine_checkpoint, num_speculative_tokens=2)
    layers = plain.model_config.num_hidden_layers
    assert plain.model_config.num_mtp_layers == 0 and len(plain.model.model.layers) == layers
    assert spec.model_config.num_mtp_layers == 1 and len(spec.model.model.layers) == layers + 1
    # No KV pages for a layer that never runs.
    assert len(plain.kv_cache.latent) == layers and len(spec.kv_cache.latent) == layers + 1
    assert plain.cache_bytes_per_token < spec.cache_bytes_per_token
