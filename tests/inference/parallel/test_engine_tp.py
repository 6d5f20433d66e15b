"""Engine(tensor_parallel_size=2) vs Engine(1): the same tokens and usage under concurrency,
preemption, prefix hits from both tiers, MTP and seeded sampling (one follower process, spawned
once for the module), and identical replicated state on both ranks afterwards."""

from __future__ import annotations

import pytest
import torch

from inference.engine import Engine, EngineConfig, GenerateRequest, SamplingParams

PS = 16
# 12 device pages: eight concurrent requests do not fit (preemption), evicted prefixes spill to
# the host tier and come back from it; two MTP drafts per step.
CONFIG = dict(dtype="float32", page_size=PS, kv_budget_tokens=12 * PS, host_budget_tokens=40 * PS,
              num_speculative_tokens=2, session_ttl_s=0.0)


def _prompt(seed: int, n: int) -> list[int]:
    return torch.randint(3, 400, (n,), generator=torch.Generator().manual_seed(seed)).tolist()


def _greedy(prompt, n, **kw) -> GenerateRequest:
    return GenerateRequest(prompt_ids=prompt, params=SamplingParams(temperature=0.0, max_tokens=n, ignore_eos=True), **kw)


@pytest.fixture(scope="module")
def engines(tp_checkpoint):
    one = Engine(tp_checkpoint, EngineConfig(**CONFIG))
    two = Engine(tp_checkpoint, EngineConfig(**CONFIG, parallel={"tensor_parallel_size": 2}))
    yield one, two
    two.shutdown()
    assert two.ranks.exit_codes() == [0]  # the follower exited on Stop


def _both(engines, requests_fn):
    return [[(r.token_ids, r.usage) for r in eng.generate(requests_fn())] for eng in engines]


def test_concurrent_requests_with_preemption(engines):
    lengths = [5, 17, 33, 64, 80, 101, 120, 150]
    one, two = _both(engines, lambda: [_greedy(_prompt(i, n), 10) for i, n in enumerate(lengths)])
    assert one == two
    assert engines[1].stats()["preemptions"] > 0 and engines[0].stats()["preemptions"] > 0


def test_session_turns_hit_the_device_and_host_tiers(engines):
    first = _prompt(100, 40)
    outs = []
    for eng in engines:
        r1 = eng.generate([_greedy(first, 8, session_id="s")])[0]
        turn2 = first + r1.token_ids + _prompt(101, 20)
        r2 = eng.generate([_greedy(turn2, 8, session_id="s")])[0]
        eng.generate([_greedy(_prompt(200 + i, 150), 4) for i in range(2)])  # evict turn 2 to the host
        r3 = eng.generate([_greedy(turn2 + r2.token_ids + [7, 8, 9], 8, session_id="s")])[0]
        outs.append([(r.token_ids, r.usage) for r in (r1, r2, r3)])
    assert outs[0] == outs[1]
    r2_usage, r3_usage = outs[1][1][1], outs[1][2][1]
    assert r2_usage.cached_tokens > 0 and r3_usage.cached_tokens_host > 0
    assert engines[1].stats()["pages_restored"] > 0


def test_seeded_sampling_and_mtp_drafts(engines):
    def reqs():
        params = SamplingParams(temperature=1.0, top_p=0.9, seed=7, max_tokens=12, ignore_eos=True)
        return [GenerateRequest(prompt_ids=_prompt(300 + i, 30 + 20 * i), params=params) for i in range(3)]

    one, two = _both(engines, reqs)
    assert one == two
    assert sum(u.spec_draft_tokens for _, u in two) > 0


def test_replicated_state_is_identical_on_both_ranks(engines):
    digests = engines[1].runner.replica_digests()
    assert len(digests) == 2 and digests[0] == digests[1]
    assert engines[1].runner.commands_sent > 0
