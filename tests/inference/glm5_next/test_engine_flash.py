"""GLM-5.3-Flash in the serving engine: greedy outputs under concurrency equal the model's own
greedy decoding alone, with chunked prefill at odd chunk sizes, preemption and aborts; state
slots all come back (no leak over a few hundred mixed requests)."""

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
    return write_flash_checkpoint(tmp_path_factory.mktemp("flash-engine"), "flash-tiny", seed=21, dtype=torch.float32)


def _engine(ckpt, **overrides) -> Engine:
    cfg = dict(dtype="float32", kv_budget_tokens=512, page_size=PS, enable_prefix_cache=False)
    cfg.update(overrides)
    return Engine(ckpt, EngineConfig(**cfg))


def _req(prompt, n, rid=None) -> GenerateRequest:
    return GenerateRequest(prompt_ids=prompt, params=SamplingParams(temperature=0.0, max_tokens=n, ignore_eos=True),
                           request_id=rid)


def _prompt(seed: int, n: int) -> list[int]:
    return torch.randint(3, 500, (n,), generator=torch.Generator().manual_seed(seed)).tolist()


@pytest.fixture(scope="module")
def expected(ckpt):
    model = load_flash_model(ckpt)
    prompts = [_prompt(i, n) for i, n in enumerate([5, 23, 14, 9, 31, 2])]
    return prompts, [model.generate(torch.tensor([p]), max_new_tokens=7)[0].tolist() for p in prompts]


@pytest.mark.parametrize("chunk_size, max_batch_tokens", [(512, 2048), (5, 13), (3, 7)])
def test_concurrent_greedy_equals_alone(ckpt, expected, chunk_size, max_batch_tokens):
    prompts, want = expected
    eng = _engine(ckpt, chunk_size=chunk_size, max_batch_tokens=max_batch_tokens)
    got = [r.token_ids for r in eng.generate([_req(p, 7) for p in prompts])]
    assert got == want
    assert eng.runner.slots_in_use == 0 or all(s.status.name != "RUNNING" for s, _ in eng.runner._slot_of.values())


def test_preemption_recomputes_and_matches(ckpt, expected):
    prompts, want = expected
    eng = _engine(ckpt, kv_budget_tokens=6 * PS, max_running=4)  # 48 tokens for 6 requests: someone waits or is preempted
    got = [r.token_ids for r in eng.generate([_req(p, 7) for p in prompts])]
    assert got == want
    assert eng.stats()["preemptions"] > 0


def test_aborts_and_many_mixed_requests_return_every_slot_and_page(ckpt):
    eng = _engine(ckpt, kv_budget_tokens=20 * PS, max_running=6, chunk_size=9, max_batch_tokens=40)
    rng = random.Random(0)
    handles = []
    for i in range(200):
        handles.append(eng.submit(_req(_prompt(1000 + i, rng.randrange(1, 30)), rng.randrange(1, 4), rid=f"r{i}")))
        if rng.random() < 0.15:
            eng.abort(f"r{rng.randrange(i + 1)}")
        if i % 20 == 0:
            eng.step()
    results = [h.result() for h in handles]
    assert {r.finish_reason for r in results} <= {"length", "abort"}
    assert any(r.finish_reason == "abort" for r in results)
    s = eng.stats()
    assert s["running"] == s["waiting"] == 0 and s["free_pages"] == s["total_pages"]
    eng.runner._reclaim()
    assert eng.runner.slots_in_use == 0


def test_prompt_logprobs_equal_the_models_own(ckpt, expected):
    prompts, _ = expected
    eng = _engine(ckpt, chunk_size=5)
    model = load_flash_model(ckpt)
    prompt = prompts[4]
    want = torch.log_softmax(model(torch.tensor([prompt]))[0, :-1].float(), dim=-1)
    got = eng.prompt_logprobs(prompt, top_n=2)
    assert got[0] is None and len(got) == len(prompt)
    for i, lp in enumerate(got[1:]):
        assert lp.token_id == prompt[i + 1] and abs(lp.logprob - want[i, prompt[i + 1]].item()) < 1e-4
    assert [r.token_ids for r in eng.generate([_req(p, 7) for p in prompts])] == expected[1]  # slots untouched


def test_unsupported_engine_options_are_refused_by_name(ckpt):
    with pytest.raises(ValueError, match="num_speculative_tokens"):
        _engine(ckpt, num_speculative_tokens=1)
    with pytest.raises(ValueError, match="kv_cache_dtype"):
        _engine(ckpt, kv_cache_dtype="fp8")


def test_overlap_scheduling_is_refused_by_name_and_off_by_default(ckpt):
    with pytest.raises(ValueError, match="overlap_schedule=True: GLM-5.3-Flash checkpoints step serially"):
        _engine(ckpt, overlap_schedule=True)
    assert _engine(ckpt).overlap is None
