"""Engine with DP attention over 2 real processes (gloo) vs the single-process engine: the same
tokens for concurrent requests of different lengths with prefix hits, preemption, MTP and seeded
sampling; the same tokens and usage (`cached_tokens` included) for a session whose turns hit the
device and the host tier. The default layout: split extras (embedding, LM head, dense MLPs and
shared expert split over the ranks, their rows exchanged). One follower process, spawned once for
the module.

Exactness: the router scores in fp32 and its GEMM rounds differently for the different row counts
a DP rank routes (its gathered batch, not the node's), so logits agree to ~1e-6 in fp32, not bit for
bit; the tests compare token ids exactly and logprobs within 1e-4."""

from __future__ import annotations

import pytest
import torch

from inference.engine import Engine, EngineConfig, GenerateRequest, SamplingParams

PS = 16
# 9 pages per rank (and for the single process): four concurrent requests do not fit one rank
# (preemption); evicted prefixes spill to the host tier and come back from it; two MTP drafts.
CONFIG = dict(dtype="float32", page_size=PS, kv_budget_tokens=9 * PS, host_budget_tokens=40 * PS,
              num_speculative_tokens=2, session_ttl_s=0.0)


def _prompt(seed: int, n: int) -> list[int]:
    return torch.randint(3, 400, (n,), generator=torch.Generator().manual_seed(seed)).tolist()


def _request(prompt, n, seeded: bool = False, **kw) -> GenerateRequest:
    sampling = dict(temperature=1.0, top_p=0.9, seed=7) if seeded else dict(temperature=0.0)
    return GenerateRequest(prompt_ids=prompt, params=SamplingParams(max_tokens=n, ignore_eos=True, logprobs=0, **sampling),
                           **kw)


@pytest.fixture(scope="module")
def engines(dp_checkpoint):
    one = Engine(dp_checkpoint, EngineConfig(**CONFIG))
    dp = Engine(dp_checkpoint, EngineConfig(**CONFIG, parallel={"tensor_parallel_size": 2, "attention_dp": True}))
    assert dp.model.parallel.dp_split_extras  # the default layout
    yield one, dp
    dp.shutdown()
    assert dp.ranks.exit_codes() == [0]  # the follower exited on Stop


def _assert_same_outputs(a, b) -> None:
    for x, y in zip(a, b):
        assert x.token_ids == y.token_ids
        diff = max(abs(p.logprob - q.logprob) for p, q in zip(x.logprobs, y.logprobs))
        assert diff < 1e-4


def test_concurrent_requests_with_prefix_hits_preemption_and_mtp(engines):
    shared = _prompt(5, 2 * PS)  # half the requests start with the same two pages
    lengths = [9, 17, 33, 50, 64, 80, 101, 120]
    prefix = lambda i: shared if i in (3, 4, 6, 7) else []
    reqs = lambda: [_request(prefix(i) + _prompt(i, n - len(prefix(i))), 10, seeded=i in (2, 5))
                    for i, n in enumerate(lengths)]
    one, dp = (eng.generate(reqs()) for eng in engines)
    _assert_same_outputs(one, dp)
    assert [r.usage.prompt_tokens for r in one] == [r.usage.prompt_tokens for r in dp] == lengths
    stats = engines[1].stats()
    assert stats["preemptions"] > 0 and engines[0].stats()["preemptions"] > 0
    assert all(r["placed"] >= 3 for r in stats["dp_ranks"])  # both ranks served requests
    assert sum(r.usage.cached_tokens for r in dp) > 0  # the shared pages hit (once computed on each rank)
    assert sum(r.usage.spec_draft_tokens for r in dp) > 0


def test_session_turns_hit_the_device_and_host_tiers_with_the_same_usage(engines):
    """All turns of a session on one rank, whose pool then does exactly what the single process's
    does: the same tokens and the same usage, cached tokens from both tiers included."""
    outs = []
    for eng in engines:
        eng.clear_cache()
        first = _prompt(100, 40)
        r1 = eng.generate([_request(first, 8, session_id="s")])[0]
        turn2 = first + r1.token_ids + _prompt(101, 20)
        r2 = eng.generate([_request(turn2, 8, session_id="s")])[0]
        # Two long requests of the same session (so on its rank) push turn 2 out to the host tier.
        eng.generate([_request(_prompt(200 + i, 120), 4, session_id="s") for i in range(2)])
        r3 = eng.generate([_request(turn2 + r2.token_ids + [7, 8, 9], 8, session_id="s")])[0]
        outs.append([(r.token_ids, r.usage) for r in (r1, r2, r3)])
    assert outs[0] == outs[1]
    r2_usage, r3_usage = outs[1][1][1], outs[1][2][1]
    assert r2_usage.cached_tokens > 0 and r3_usage.cached_tokens_host > 0
    dp = engines[1]
    rank = dp.dp.placer.rank_of("s")
    assert {p.rank for p in dp.dp.placements if p.session_id == "s"} == {rank}
    assert dp.stats()["dp_ranks"][rank]["pages_restored"] > 0
