#!/usr/bin/env python3
"""Replay agent traces through the engine's own scheduler and prefix cache under a cost model.

Two policies in one run, same device capacity (half the working set):
- horizon: session retention (TTL) + host tier holding the rest of the working set;
- lru:     plain LRU prefix cache (no retention, no host tier).

The model forward is replaced by a cost model (prefill throughput, per-step overhead, host->device
copy bandwidth), so traces with millions of prompt tokens replay on a CPU; the scheduler and the
radix cache are `inference.engine`'s real classes. Replay rules: ../shared/traces/README.md.

    python benchmarks/agent_cache.py                 # 64 sessions, 16 concurrent, scale 0.1
    python benchmarks/agent_cache.py --trace traces.jsonl
    python benchmarks/agent_cache.py --quick
    python benchmarks/agent_cache.py --dp 8          # + DP-attention ranks (policies below)
    python benchmarks/agent_cache.py --model flash-tiny   # GLM-5.3-Flash, the real model: agent_cache_flash.py

With --dp N the same trace is also replayed on a node of N data-parallel attention ranks, each
with its own scheduler, radix cache and host tier holding 1/N of the node's KV, the ranks stepping
in lockstep (a step lasts as long as the slowest rank's: they meet in every MoE layer). The node's
KV under DP is --dp-capacity-ratio times the TP node's (attention weights replicated per rank, the
cache no longer replicated: 3.41 for GLM-5.3 on 8xH200, `horizon model plan glm-5.3 --dp-attention`).
Policies: tp-replicated (one cache, the TP budget), dp-affinity (a session's turns stay on the rank
its first turn went to, the least loaded one) and dp-random (every turn to a random rank). Each
row adds concurrent_sessions: the most sessions held at once (a turn running, or the context of
its last turn retained on the device, so the next turn hits without a restore).
"""

from __future__ import annotations

import argparse
import heapq
import random
import importlib.util
import json
import os
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from inference.engine.engine_config import EngineConfig  # noqa: E402
from inference.engine.host_tier import HostTier  # noqa: E402
from inference.engine.page_allocator import PageAllocator  # noqa: E402
from inference.engine.radix_cache import RadixCache  # noqa: E402
from inference.engine.sampling_params import SamplingParams  # noqa: E402
from inference.engine.scheduler import Scheduler  # noqa: E402
from inference.engine.sequence import Sequence  # noqa: E402

VOCAB = 154880


def load_trace_module():
    candidates = [os.environ.get("HORIZON_TRACES_DIR"), REPO.parent / "shared" / "traces", "/work/shared/traces"]
    for folder in candidates:
        if folder and (Path(folder) / "agent_traces.py").exists():
            spec = importlib.util.spec_from_file_location("agent_traces", Path(folder) / "agent_traces.py")
            module = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(module)
            return module
    raise SystemExit("agent_traces.py not found: set HORIZON_TRACES_DIR to the shared traces folder")


class CostModel:
    """Seconds per engine step. Defaults: a GLM-5.x FP8 node (serving.md §5.3): ~4K prefill tok/s,
    ~20 ms per decode step, ~54 KB of KV per token over a ~50 GB/s host link."""

    def __init__(self, prefill_tok_s=4000.0, step_s=0.02, kv_bytes_per_token=53_900, host_gb_s=50.0):
        self.prefill_tok_s = prefill_tok_s
        self.step_s = step_s
        self.kv_bytes_per_token = kv_bytes_per_token
        self.host_bytes_s = host_gb_s * 1e9

    def step(self, prefill_tokens: int, restored_tokens: int) -> float:
        return (self.step_s + prefill_tokens / self.prefill_tok_s
                + restored_tokens * self.kv_bytes_per_token / self.host_bytes_s)


def unbounded_capacity(sessions: list[dict]) -> int:
    """Enough tokens to never evict: every prompt and output of every session."""
    return sum(s["system_tokens"] + s["task_tokens"] + sum(t["output_tokens"] + t["observation_tokens"] for t in s["turns"])
               for s in sessions)


class Rank:
    """One KV pool: the engine's own scheduler, radix cache and host tier over its pages."""

    def __init__(self, device_tokens: int, host_tokens: int, page_size: int, ttl_s: float, now: list[float]):
        config = EngineConfig(kv_budget_tokens=device_tokens, page_size=page_size, max_batch_tokens=8192,
                              chunk_size=4096, max_running=256, session_ttl_s=ttl_s, host_budget_tokens=host_tokens)
        self.allocator = PageAllocator(config.device_pages(1))
        self.cache = RadixCache(page_size, self.allocator, HostTier(config.host_pages()), clock=lambda: now[0])
        self.sched = Scheduler(config, self.cache, self.allocator)

    def load(self) -> int:
        """Tokens queued or held: what placement balances."""
        queued = sum(s.prompt_len for s in self.sched.waiting)
        return queued + (self.allocator.num_pages - self.allocator.num_free)


def replay(sessions: list[dict], policy: str, device_tokens: int, host_tokens: int, page_size: int,
           ttl_s: float, cost: CostModel, ranks: int = 1, seed: int = 0) -> dict:
    """device_tokens / host_tokens: per rank. policy: horizon | lru | unbounded (one rank), or
    tp-replicated | dp-affinity | dp-random."""
    now = [0.0]
    pools = [Rank(device_tokens, host_tokens, page_size, ttl_s, now) for _ in range(ranks)]
    home: dict[int, int] = {}  # session -> rank (dp-affinity)
    rng = random.Random(seed)

    def place(i: int) -> Rank:
        if policy == "dp-random":
            return pools[rng.randrange(ranks)]
        if i not in home:
            home[i] = min(range(ranks), key=lambda r: pools[r].load())
        return pools[home[i]]

    arrivals: list[tuple[float, int, int]] = []  # (time, session index, turn index)
    turns = {}
    for i, s in enumerate(sessions):
        turns[i] = trace_module.materialize(s, VOCAB)
        heapq.heappush(arrivals, (s["arrival_s"], i, 0))
    live: dict[int, tuple[int, int, float, list[int]]] = {}  # id(seq) -> (session, turn, arrival, outputs)
    totals = dict(prompt=0, device=0, host=0)
    late_ttft: list[float] = []
    first_token: set[int] = set()
    # Working set = the peak, over time, of the contexts of live sessions (shared prefixes once).
    context: dict[int, int] = {}
    peak_live = peak_sessions = 0
    while arrivals or any(r.sched.has_work() for r in pools):
        while arrivals and arrivals[0][0] <= now[0]:
            t, i, k = heapq.heappop(arrivals)
            prompt, output = turns[i][k]
            seq = Sequence(f"{i}:{k}", prompt, SamplingParams(max_tokens=len(output)),
                           session_id=sessions[i]["session_id"] if policy not in ("lru", "unbounded") else None)
            live[id(seq)] = (i, k, t, output)
            context[i] = len(prompt) + len(output)
            groups = {sessions[j]["system_group"]: sessions[j]["system_tokens"] for j in context}
            peak_live = max(peak_live, sum(context.values()) - sum(
                (sum(1 for j in context if sessions[j]["system_group"] == g) - 1) * n for g, n in groups.items()))
            place(i).sched.add(seq)
        if not any(r.sched.has_work() for r in pools):
            now[0] = arrivals[0][0]
            continue
        steps = []
        for r in pools:
            if r.sched.has_work():
                batch = r.sched.schedule()
                if batch is None:  # waiting on capacity that nothing running will free: cannot happen
                    raise RuntimeError("scheduler made no progress")
                steps.append((r.sched, batch))
        # Sessions held: a turn running, or the last turn's context retained on the device.
        held = {sessions[live[id(s)][0]]["session_id"] for r in pools for s in r.sched.running}
        held.update(sid for r in pools for sid in r.cache.resident_sessions())
        peak_sessions = max(peak_sessions, len(held))
        # Lockstep: DP ranks meet in every MoE layer, so a step lasts as long as its slowest rank's.
        now[0] += max(cost.step(sum(len(it.token_ids) for it in b.items if not it.seq.in_decode),
                                b.restored_pages * page_size) for _, b in steps)
        for sched, batch in steps:
            for it in batch.items:
                seq = it.seq
                was_prefill = not seq.in_decode
                seq.num_computed += len(it.token_ids)
                if was_prefill:
                    sched.cache_prefix(seq)  # as the engine does after every prefill chunk
                if it.num_logits == 0:
                    continue
                i, k, t_arrival, output = live[id(seq)]
                if seq.num_output == 0 and id(seq) not in first_token:
                    first_token.add(id(seq))
                    if k >= len(sessions[i]["turns"]) // 2:
                        late_ttft.append(now[0] - t_arrival)
                seq.tokens.append(output[seq.num_output])
                if seq.num_output == len(output):
                    totals["prompt"] += seq.prompt_len
                    totals["device"] += seq.cached_device
                    totals["host"] += seq.cached_host
                    sched.finish(seq, "stop")
                    del live[id(seq)]
                    if k + 1 < len(sessions[i]["turns"]):
                        heapq.heappush(arrivals, (now[0] + sessions[i]["turns"][k]["tool_s"], i, k + 1))
                    else:
                        del context[i]
    hits = totals["device"] + totals["host"]
    late_ttft.sort()
    caches = [r.cache for r in pools]
    return {
        "policy": policy,
        "sessions": len(sessions),
        "ranks": ranks,
        "prompt_tokens": totals["prompt"],
        "hit_tokens": hits,
        "hit_rate": round(hits / max(1, totals["prompt"]), 4),
        "device_hit_tokens": totals["device"],
        "device_hit_rate": round(totals["device"] / max(1, totals["prompt"]), 4),
        "host_hit_rate": round(totals["host"] / max(1, totals["prompt"]), 4),
        "host_hit_tokens": totals["host"],
        "recomputed_tokens": totals["prompt"] - hits,
        "capacity_tokens": sum(r.allocator.num_pages for r in pools) * page_size,
        "host_capacity_tokens": sum(c.host.allocator.num_pages for c in caches) * page_size,
        "late_turn_ttft_mean_s": round(sum(late_ttft) / max(1, len(late_ttft)), 4),
        "late_turn_ttft_p90_s": round(late_ttft[int(0.9 * (len(late_ttft) - 1))], 4) if late_ttft else 0.0,
        "host_pages_spilled": sum(c.host.pages_spilled for c in caches),
        "host_pages_restored": sum(c.host.pages_restored for c in caches),  # tails and partly matched pages included
        "preemptions": sum(r.sched.num_preemptions for r in pools),
        "concurrent_sessions": peak_sessions,
        "peak_live_tokens": peak_live,
        "virtual_time_s": round(now[0], 1),
    }


trace_module = None


def main(argv: list[str] | None = None) -> int:
    global trace_module
    argv = sys.argv[1:] if argv is None else argv
    if any(arg == "--model" or arg.startswith("--model=") for arg in argv):
        from benchmarks.agent_cache_flash import run as run_flash

        trace_module = load_trace_module()
        return run_flash(argv, trace_module, lambda sessions, page_size: replay(
            sessions, "unbounded", unbounded_capacity(sessions), 0, page_size, 0.0, CostModel())["peak_live_tokens"])
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--trace", help="JSONL trace file (default: generate one in-process)")
    p.add_argument("--sessions", type=int, default=64)
    p.add_argument("--concurrency", type=int, default=16)
    p.add_argument("--scale", type=float, default=0.1)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--page-size", type=int, default=64)
    p.add_argument("--ttl", type=float, default=120.0, help="session retention TTL (virtual seconds)")
    p.add_argument("--dp", type=int, default=0, help="also replay on N DP-attention ranks (tp-replicated, "
                   "dp-affinity, dp-random)")
    p.add_argument("--dp-capacity-ratio", type=float, default=3.41,
                   help="node KV under DP-attention / under TP (3.41: GLM-5.3 on 8xH200, FP8 KV)")
    p.add_argument("--dp-tp-fraction", type=float, default=0.25,
                   help="with --dp: the TP node's KV as a fraction of the working set (0.25: four times more "
                        "live context than TP holds, as 24 long sessions against TP8's 6 on 8xH200)")
    p.add_argument("--quick", action="store_true", help="small trace for CI")
    a = p.parse_args(argv)
    if a.quick:
        a.sessions, a.concurrency, a.scale = 12, 6, 0.03
    trace_module = load_trace_module()
    if a.trace:
        with open(a.trace) as f:
            sessions = [json.loads(line) for line in f if line.strip()]
    else:
        sessions = list(trace_module.generate(a.sessions, a.concurrency, a.scale, 1.0, 1, a.seed))
    cost = CostModel()
    # The working set is measured, not guessed: the peak live context of an unbounded replay.
    ws = replay(sessions, "unbounded", unbounded_capacity(sessions), 0, a.page_size, a.ttl, cost)["peak_live_tokens"]
    device = ws // 2
    print(f"# {len(sessions)} sessions, {a.concurrency} concurrent, working set {ws} tokens: "
          f"device {device}, host {ws - device}, page {a.page_size}", flush=True)
    results = {}
    for policy, host, ttl in (("lru", 0, 0.0), ("horizon", ws - device, a.ttl)):
        r = replay(sessions, policy, device, host, a.page_size, ttl, cost)
        results[policy] = r
        print(json.dumps(r), flush=True)
    ours, lru = results["horizon"], results["lru"]
    print(json.dumps({"comparison": {
        "hit_rate": ours["hit_rate"], "lru_hit_rate": lru["hit_rate"],
        "recompute_reduction_vs_lru": round(lru["recomputed_tokens"] / max(1, ours["recomputed_tokens"]), 2),
        "late_ttft_speedup_vs_lru": round(lru["late_turn_ttft_mean_s"] / max(1e-9, ours["late_turn_ttft_mean_s"]), 2),
        "unbounded_hit_rate": trace_module.describe(sessions)["unbounded_cache_hit_rate"],
    }}), flush=True)
    if a.dp:
        tp_device = max(a.page_size, int(ws * a.dp_tp_fraction))
        replay_dp(sessions, a.dp, a.dp_capacity_ratio, tp_device, ws - tp_device, a.page_size, a.ttl, cost, a.seed)
    return 0


def replay_dp(sessions, n: int, ratio: float, tp_device: int, tp_host: int, page_size: int, ttl: float,
              cost: CostModel, seed: int) -> None:
    """(a) TP: one cache of tp_device tokens (replicated on every rank, so also the node's);
    (b), (c) DP: n caches of ratio * tp_device / n tokens each; host tiers alike (per-rank host
    memory is not duplicated under DP either)."""
    per_rank = max(page_size, int(ratio * tp_device / n) // page_size * page_size)
    host_per_rank = int(ratio * tp_host / n) // page_size * page_size
    longest = max(s["system_tokens"] + s["task_tokens"] + sum(t["output_tokens"] + t["observation_tokens"]
                                                              for t in s["turns"]) for s in sessions)
    if per_rank < longest + page_size:
        # A session lives on one rank: none may outgrow it (GLM-5.3's 256K per rank holds the
        # longest agent contexts seen, ~180K). Fewer ranks, or a larger --dp-tp-fraction, here.
        raise SystemExit(f"--dp {n}: {per_rank} KV tokens per rank cannot hold the longest session "
                         f"({longest} tokens); use fewer ranks or a larger --dp-tp-fraction")
    print(f"# DP: {n} ranks x {per_rank} KV tokens (node {n * per_rank}) vs TP {tp_device}; longest session "
          f"{longest} tokens", flush=True)
    rows = {
        "tp-replicated": replay(sessions, "tp-replicated", tp_device, tp_host, page_size, ttl, cost),
        "dp-affinity": replay(sessions, "dp-affinity", per_rank, host_per_rank, page_size, ttl, cost, n, seed),
        "dp-random": replay(sessions, "dp-random", per_rank, host_per_rank, page_size, ttl, cost, n, seed),
    }
    for r in rows.values():
        print(json.dumps(r), flush=True)
    tp, aff, rnd = rows["tp-replicated"], rows["dp-affinity"], rows["dp-random"]
    print(json.dumps({"dp_comparison": {
        "ranks": n, "capacity_ratio": ratio,
        "dp_affinity_hit_rate": aff["hit_rate"], "dp_random_hit_rate": rnd["hit_rate"], "tp_hit_rate": tp["hit_rate"],
        "concurrent_sessions_vs_tp": round(aff["concurrent_sessions"] / max(1, tp["concurrent_sessions"]), 2),
        "affinity_recompute_reduction_vs_random": round(rnd["recomputed_tokens"] / max(1, aff["recomputed_tokens"]), 2),
        "late_ttft_speedup_vs_tp": round(tp["late_turn_ttft_mean_s"] / max(1e-9, aff["late_turn_ttft_mean_s"]), 2),
    }}), flush=True)


if __name__ == "__main__":
    raise SystemExit(main())
