"""benchmarks/agent_cache.py --dp: what "sessions held" counts, budgets taken from the memory plan,
the trace shaping (context cut at one rank's KV, a fleet already at work) and the --quick run."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest

from inference.engine.sampling_params import SamplingParams
from inference.engine.sequence import Sequence

REPO = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(REPO))

from benchmarks import agent_cache_dp  # noqa: E402
from benchmarks.agent_cache import CostModel, OneRank, sessions_held  # noqa: E402


def _start_turn(node: OneRank, request_id: str, prompt: list[int], output: list[int]) -> Sequence:
    """Admit and prefill one turn until its first token, as the replay does."""
    rank = node.pools[0]
    seq = Sequence(request_id, prompt, SamplingParams(max_tokens=len(output)),
                   session_id=request_id.rpartition(":")[0])
    rank.sched.add(seq)
    while seq.num_output == 0:
        for it in rank.sched.schedule().items:
            prefill = not it.seq.in_decode
            it.seq.num_computed += len(it.token_ids)
            if prefill:
                rank.sched.cache_prefix(it.seq)
            if it.num_logits:
                it.seq.tokens.append(output[it.seq.num_output])
    return seq


def _run_turn(node: OneRank, request_id: str, prompt: list[int], output: list[int]) -> None:
    seq = _start_turn(node, request_id, prompt, output)
    seq.tokens.extend(output[1:])  # the decode steps: pages for them, then the cache takes the turn
    node.pools[0].sched.grow(seq, len(seq.tokens))
    seq.num_computed = len(seq.tokens) - 1
    node.pools[0].sched.finish(seq, "stop")


def test_sessions_held_are_live_sessions_whose_context_is_on_the_device():
    node = OneRank(device_tokens=96, host_tokens=256, page_size=8, ttl_s=60.0, cost=CostModel())
    rank = node.pools[0]
    _run_turn(node, "a:0", list(range(1000, 1040)), [1, 2, 3])
    assert sessions_held(node.pools, {"a": rank}) == 1  # retained between turns, all of it resident
    assert sessions_held(node.pools, {}) == 0  # that was its last turn: a finished session is not held
    other = OneRank(device_tokens=96, host_tokens=0, page_size=8, ttl_s=60.0, cost=CostModel()).pools[0]
    assert sessions_held(node.pools + [other], {"a": other}) == 0  # retained on another rank's device only

    b = Sequence("b:0", list(range(2000, 2024)), SamplingParams(max_tokens=4), session_id="b")
    rank.sched.add(b)
    rank.sched.schedule()  # admitted, prefill under way: its context is not all computed yet
    assert sessions_held(node.pools, {"a": rank}) == 1
    rank.sched.finish(b, "abort")
    b = _start_turn(node, "b:0", list(range(2000, 2024)), [5, 6])
    assert b.in_decode and sessions_held(node.pools, {"a": rank}) == 2  # decoding: all of it resident
    b.tokens.append(6)
    b.num_computed += 1
    rank.sched.finish(b, "stop")

    # A longer turn of b needs a's pages: they spill to the host tier and a is no longer held.
    _run_turn(node, "b:1", list(range(2000, 2024)) + [5, 6] + list(range(3000, 3062)), [4])
    assert rank.cache.host_cached_pages > 0
    assert sessions_held(node.pools, {"a": rank, "b": rank}) == 1

    node.now[0] += 61.0  # past the TTL: no longer retained, so no longer counted
    assert sessions_held(node.pools, {"a": rank, "b": rank}) == 0


def _session(sid: str, system: int, task: int, turns: list[tuple[int, int]]) -> dict:
    return {"session_id": sid, "arrival_s": 0.0, "system_group": "g0", "system_tokens": system,
            "task_tokens": task, "turns": [{"output_tokens": o, "tool_s": 1.0, "observation_tokens": b}
                                           for o, b in turns]}


def test_fit_context_cuts_a_session_at_one_ranks_kv():
    s = _session("s", 10, 20, [(5, 30), (5, 30), (5, 30)])  # turn contexts 35, 70, 105 with output
    cut, n = agent_cache_dp.fit_context([s], 80)
    assert n == 1 and len(cut[0]["turns"]) == 2 and len(s["turns"]) == 3
    kept, n = agent_cache_dp.fit_context([s], 105)
    assert n == 0 and kept[0]["turns"] == s["turns"]
    with pytest.raises(ValueError, match="session s: its first turn needs 35 KV tokens, more than one rank's 30"):
        agent_cache_dp.fit_context([s], 30)


def test_warm_start_folds_the_first_waves_early_turns_into_its_first_prompt():
    sessions = [_session(f"s{i}", 10, 20, [(5, 30)] * 6) for i in range(40)]
    warm = agent_cache_dp.warm_start(sessions, first_wave=20, seed=3)
    for s, w in zip(sessions[:20], warm[:20]):
        skipped = len(s["turns"]) - len(w["turns"])
        assert w["task_tokens"] == s["task_tokens"] + 35 * skipped  # every token of the session kept
    assert any(len(w["turns"]) < 6 for w in warm[:20])
    assert warm[20:] == sessions[20:]
    assert agent_cache_dp.mean_live_context(warm[:20]) > agent_cache_dp.mean_live_context(sessions[:20])


def test_budgets_are_the_memory_plan_scaled_by_the_trace_scale():
    """`horizon model plan glm-5.3 --dp-attention` on H200s as nvidia-smi reports them (143771 MiB):
    TP8 601K KV tokens per rank (= per node); DP8 with split extras (the engine's default) 374K per
    rank (2.99M per node), with replicated extras 256K (2.05M); scaleout.md §3.3."""
    b = agent_cache_dp.node_budgets(0.1, 8, 64)
    assert b.extras == "split"
    assert 600_000 < b.plan_tp_tokens < 602_000 and 2_980_000 < b.plan_dp_tokens_per_node < 3_000_000
    assert b.tp_device == int(0.1 * b.plan_tp_tokens) // 64 * 64
    assert b.dp_device_per_rank == int(0.1 * b.plan_dp_tokens_per_node / 8) // 64 * 64
    assert 4.9 < b.dp_node_tokens / b.tp_device < 5.1
    assert abs(b.dp_host_per_rank * 8 - b.tp_host) <= 8 * 64  # one host budget for every policy
    replicated = agent_cache_dp.node_budgets(0.1, 8, 64, extras="replicated")
    assert 2_040_000 < replicated.plan_dp_tokens_per_node < 2_060_000 and replicated.tp_device == b.tp_device
    with pytest.raises(ValueError, match="--scale 2"):
        agent_cache_dp.node_budgets(2, 8, 64)


def test_a_dp_rank_runs_less_alone_with_split_extras():
    """Split extras run on every rank's tokens (node rate), like the routed experts: only attention
    stays a rank's own work in the step-time model."""
    split, replicated = agent_cache_dp.attention_share("split"), agent_cache_dp.attention_share("replicated")
    assert 0.4 < split < replicated < 0.6


def test_agent_cache_dp_quick(capsys):
    spec = importlib.util.spec_from_file_location("bench_agent_cache_dp_run", REPO / "benchmarks" / "agent_cache.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    assert bench.main(["--quick", "--dp", "2"]) == 0
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines() if line.startswith("{")]
    rows = {line["policy"]: line for line in lines if "policy" in line}
    assert set(rows) == {"tp-replicated", "dp-affinity", "dp-random"}
    tp, aff, rnd = rows["tp-replicated"], rows["dp-affinity"], rows["dp-random"]
    assert tp["ranks"] == 1 and aff["ranks"] == rnd["ranks"] == 2
    assert tp["prompt_tokens"] == aff["prompt_tokens"] == rnd["prompt_tokens"]
    assert 4.8 < aff["capacity_tokens"] / tp["capacity_tokens"] < 5.1  # split extras: the engine's default
    assert aff["max_ranks_per_session"] == 1 < rnd["max_ranks_per_session"]  # affinity: one rank per session
    assert aff["concurrent_sessions"] > tp["concurrent_sessions"] > 0
    assert aff["recomputed_tokens"] < rnd["recomputed_tokens"]  # a session's prefix stays on its rank
    comparison = lines[-1]["dp_comparison"]
    assert comparison["concurrent_sessions_vs_tp"] == round(aff["concurrent_sessions"] / tp["concurrent_sessions"], 2)
    assert comparison["dp_extras"] == "split"
