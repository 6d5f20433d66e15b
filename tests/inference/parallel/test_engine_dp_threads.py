"""The DP-attention engine on in-process virtual ranks (parallel.backend="threads": the real follower
loop and shards over ThreadComm, no spawn): placement and session affinity from the engine's
records, a shared prefix computed once per rank, per-rank preemption and stats, outputs equal to one
process, and no page leak on any rank after 1,000 mixed and aborted requests."""

from __future__ import annotations

import pytest
import torch

from inference.engine import Engine, EngineConfig, GenerateRequest, SamplingParams
from tests.inference.engine.mixed_requests import assert_pool_drained, submit_mixed_requests

PS = 16
THREADS = {"tensor_parallel_size": 2, "attention_dp": True, "backend": "threads"}


class FakeClock:
    def __init__(self):
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def _prompt(seed: int, n: int) -> list[int]:
    return torch.randint(3, 400, (n,), generator=torch.Generator().manual_seed(seed)).tolist()


def _greedy(prompt, n, **kw) -> GenerateRequest:
    return GenerateRequest(prompt_ids=prompt, params=SamplingParams(temperature=0.0, max_tokens=n, ignore_eos=True), **kw)


# Tiny models: one intra-op thread for the whole module (tests/conftest.py).
pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture(scope="module")
def dp(dp_checkpoint):
    """16 pages per rank (preemption under load), a host tier, two MTP drafts."""
    eng = Engine(dp_checkpoint, EngineConfig(dtype="float32", page_size=PS, kv_budget_tokens=16 * PS,
                                             host_budget_tokens=24 * PS, num_speculative_tokens=2,
                                             session_ttl_s=0.0, parallel=THREADS))
    yield eng
    eng.shutdown()
    assert eng.ranks.exit_codes() == [0]


def _ranks_of(eng, request_ids) -> dict[str, int]:
    return {p.request_id: p.rank for p in eng.dp.placements if p.request_id in request_ids}


def test_session_turns_stay_on_their_rank(dp):
    dp.clear_cache()  # both ranks empty: the four new sessions alternate
    sessions = {f"aff-{s}": _prompt(10 + s, 20 + 7 * s) for s in range(4)}
    placed = []
    for turn in range(3):
        reqs = [_greedy(prompt, 3, session_id=sid, request_id=f"{sid}-t{turn}") for sid, prompt in sessions.items()]
        for r, res in zip(reqs, dp.generate(reqs)):  # the four sessions run together
            sessions[r.session_id] = r.prompt_ids + res.token_ids + _prompt(turn, 5)
            placed.append(r.request_id)
    records = [p for p in dp.dp.placements if p.request_id in placed]
    assert len(records) == 12
    home = {p.session_id: p.rank for p in records if p.request_id.endswith("-t0")}
    assert sorted(home.values()) == [0, 0, 1, 1]  # four new sessions spread by load over both ranks
    for p in records:
        assert p.rank == home[p.session_id]
        assert p.reason == ("least_load" if p.request_id.endswith("-t0") else "affinity")
        assert len(p.loads) == 2
    for sid, rank in home.items():
        assert dp.dp.placer.rank_of(sid) == rank


def test_shared_prefix_is_computed_once_per_rank(dp):
    dp.clear_cache()
    system = _prompt(77, 3 * PS)  # three whole pages every request shares
    reqs = [_greedy(system + _prompt(500 + i, 9), 2, request_id=f"shared-{i}") for i in range(6)]
    results = dp.generate(reqs)
    ranks = _ranks_of(dp, {r.request_id for r in reqs})
    assert set(ranks.values()) == {0, 1}
    for rank in (0, 1):
        cached = sorted(res.usage.cached_tokens for r, res in zip(reqs, results) if ranks[r.request_id] == rank)
        assert cached[0] == 0 and all(c == 3 * PS for c in cached[1:])  # one miss per rank, then hits
        assert all(res.usage.cached_tokens_host == 0 for res in results)


def test_outputs_equal_one_process_with_a_short_only_rank(dp, dp_checkpoint):
    """Long and short (<= index_topk) prompts on different ranks: the short rank's MTP passes have no
    top-k selection to reuse and run their indexer; every output still equals one process."""
    one = Engine(dp_checkpoint, EngineConfig(dtype="float32", page_size=PS, kv_budget_tokens=16 * PS,
                                             num_speculative_tokens=2, session_ttl_s=0.0))
    dp.clear_cache()
    reqs = lambda: [_greedy(_prompt(40, 60), 8, session_id="long"), _greedy(_prompt(41, 5), 8, session_id="short"),
                    _greedy(_prompt(42, 6), 8, session_id="short")]
    assert [r.token_ids for r in dp.generate(reqs())] == [r.token_ids for r in one.generate(reqs())]
    assert dp.dp.placer.rank_of("long") != dp.dp.placer.rank_of("short")
    # Prompt scoring runs on rank 0's pages while rank 1 idles through the exchange.
    scored = [dp.prompt_logprobs(_prompt(43, 30), top_n=2), one.prompt_logprobs(_prompt(43, 30), top_n=2)]
    assert scored[0][0] is None and scored[1][0] is None
    for a, b in zip(scored[0][1:], scored[1][1:]):
        assert a.token_id == b.token_id and [t for t, _ in a.top] == [t for t, _ in b.top]
        assert abs(a.logprob - b.logprob) < 1e-4


def test_a_full_rank_preempts_only_its_own_requests(dp):
    dp.clear_cache()
    before = [r["preemptions"] for r in dp.stats()["dp_ranks"]]
    # Session "big" fills its rank (4 x 6 pages > 16 pages); session "small" runs beside it on the other.
    first = dp.generate([_greedy(_prompt(60, 20), 1, session_id="big"), _greedy(_prompt(61, 20), 1, session_id="small")])
    assert all(r.finish_reason == "length" for r in first)
    big, small = dp.dp.placer.rank_of("big"), dp.dp.placer.rank_of("small")
    assert big != small
    reqs = [_greedy(_prompt(70 + i, 80), 12, session_id="big") for i in range(4)]
    reqs += [_greedy(_prompt(80 + i, 20), 12, session_id="small") for i in range(2)]
    assert all(len(r.token_ids) == 12 for r in dp.generate(reqs))
    after = [r["preemptions"] for r in dp.stats()["dp_ranks"]]
    assert after[big] > before[big] and after[small] == before[small]


def test_token_counts_travel_in_the_command(dp):
    """Split extras: per forward each layer (dense or MoE) exchanges tokens once each way, the
    embedding reduce-scatters once and the head all-gathers its rows once and gathers its logits
    to the leader once. The counts and token ids come with the step command: an all-gather of
    either would make the all-gathers outnumber the reduce-scatters."""
    comm = dp.ranks.state.comm
    comm.stats.reset()
    dp.generate([_greedy(_prompt(90 + i, 12 + 9 * i), 4) for i in range(3)])
    calls = comm.stats.calls
    layers = dp.model_config.num_hidden_layers
    assert calls["all_gather"] == calls["reduce_scatter"] > layers + 1
    assert 0 < calls["gather"] <= calls["broadcast_object"]


def test_replicated_extras_give_the_same_outputs(dp, dp_checkpoint):
    """dp_extras="replicated": every rank keeps the embedding, head, dense and shared MLPs whole
    and each rank's logits are gathered by the runner; the same tokens as the split layout."""
    replicated = Engine(dp_checkpoint, EngineConfig(dtype="float32", page_size=PS, kv_budget_tokens=16 * PS,
                                                    num_speculative_tokens=2, session_ttl_s=0.0,
                                                    parallel={**THREADS, "dp_extras": "replicated"}))
    try:
        assert replicated.model.lm_head.weight.shape[0] == 2 * dp.model.lm_head.weight.shape[0]
        reqs = lambda: [_greedy(_prompt(110 + i, 10 + 13 * i), 6, session_id=f"rep-{i}") for i in range(3)]
        dp.clear_cache()
        assert [r.token_ids for r in replicated.generate(reqs())] == [r.token_ids for r in dp.generate(reqs())]
        assert replicated.ranks.state.comm.stats.calls["gather"] > 0  # the runner's logits gather
    finally:
        replicated.shutdown()


def test_stats_per_rank_add_up_to_the_node(dp):
    dp.clear_cache()  # both ranks empty: the two new sessions go to different ranks
    for _ in range(2):  # two sessions, one per rank: the second turn of each hits its first
        dp.generate([_greedy(_prompt(95, 40), 2, session_id="st-a"), _greedy(_prompt(96, 40), 2, session_id="st-b")])
    assert dp.dp.placer.rank_of("st-a") != dp.dp.placer.rank_of("st-b")
    s = dp.stats()
    ranks = s["dp_ranks"]
    assert len(ranks) == 2 and s["total_pages"] == 2 * 16 and ranks[0]["total_pages"] == 16
    for key in ("free_pages", "device_cached_pages", "host_cached_pages", "running", "preemptions", "prompt_tokens"):
        assert s[key] == sum(r[key] for r in ranks)
    assert s["placements"]["least_load"] + s["placements"].get("affinity", 0) == sum(r["placed"] for r in ranks)
    hits = sum(r["hit_rate"] * r["prompt_tokens"] for r in ranks)
    assert s["hit_rate"] == pytest.approx(hits / s["prompt_tokens"])
    assert all(r["hit_rate"] > 0 for r in ranks)


def test_thousand_mixed_and_aborted_requests_leak_no_page_on_any_rank(dp_checkpoint):
    clock = FakeClock()
    eng = Engine(dp_checkpoint, EngineConfig(dtype="float32", page_size=PS, kv_budget_tokens=10 * PS,
                                             host_budget_tokens=12 * PS, max_running=24, chunk_size=32,
                                             max_batch_tokens=128, num_speculative_tokens=1, session_ttl_s=5.0,
                                             parallel=THREADS), clock=clock)
    try:
        results = [h.result() for h in submit_mixed_requests(eng, clock)]
        assert {r.finish_reason for r in results} <= {"stop", "length", "abort"}
        assert sum(r.finish_reason == "abort" for r in results) > 20
        s = eng.stats()
        assert all(r["placed"] > 300 for r in s["dp_ranks"]) and s["preemptions"] > 0
        assert s["pages_spilled"] > 0 and s["pages_restored"] > 0
        for stats in s["dp_ranks"]:
            assert_pool_drained(stats)
        for cache in eng.dp.caches:  # no lock left behind by a finished or aborted request
            assert cache.root.lock_ref == 1 and all(node.lock_ref == 0 for node in cache._nodes)
        eng.clear_cache()
        for stats in eng.stats()["dp_ranks"]:
            assert stats["free_pages"] == stats["total_pages"] and stats["host_free_pages"] == stats["host_pages"]
    finally:
        eng.shutdown()
