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
    python benchmarks/agent_cache.py --dp 8          # TP vs 8 DP-attention ranks instead (below)
    python benchmarks/agent_cache.py --model flash-tiny   # GLM-5.3-Flash, the real model: agent_cache_flash.py

With --dp N the replay compares tensor-parallel attention (one replicated cache) with N
data-parallel attention ranks (tp-replicated, dp-affinity, dp-random) on a fleet that offers more
sessions than TP can hold: benchmarks/agent_cache_dp.py says how budgets and load are set and
what `concurrent_sessions` counts.
"""

from __future__ import annotations

import argparse
import functools
import heapq
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
from inference.engine.scheduler import ScheduledBatch, Scheduler  # noqa: E402
from inference.engine.sequence import Sequence  # noqa: E402

VOCAB = 154880


@functools.lru_cache(maxsize=None)
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

    def __init__(self, device_tokens: int, host_tokens: int, page_size: int, ttl_s: float, now: list[float],
                 share: int = 1):
        """share: one of that many DP ranks, whose per-step token and request limits are the node's
        divided among them (as SGLang divides --chunked-prefill-size and --max-running-requests)."""
        config = EngineConfig(kv_budget_tokens=device_tokens, page_size=page_size, max_batch_tokens=8192 // share,
                              chunk_size=4096 // share, max_running=max(1, 256 // share), session_ttl_s=ttl_s,
                              host_budget_tokens=host_tokens)
        self.allocator = PageAllocator(config.device_pages(1))
        self.cache = RadixCache(page_size, self.allocator, HostTier(config.host_pages()), clock=lambda: now[0])
        self.sched = Scheduler(config, self.cache, self.allocator)


class OneRank:
    """The node as one KV pool (one process, or TP ranks that all hold the same cache): what
    replay() runs on. agent_cache_dp.DPNode is the same interface over N pools."""

    def __init__(self, device_tokens: int, host_tokens: int, page_size: int, ttl_s: float, cost: CostModel):
        self.page_size = page_size
        self.now = [0.0]  # virtual seconds, shared with the caches' TTL clock
        self.pools = [Rank(device_tokens, host_tokens, page_size, ttl_s, self.now)]
        self.cost = cost

    def place(self, session: int) -> Rank:
        return self.pools[0]

    def step_time(self, batches: list[ScheduledBatch]) -> float:
        (batch,) = batches
        return self.cost.step(prefill_tokens(batch), batch.restored_pages * self.page_size)


def prefill_tokens(batch: ScheduledBatch) -> int:
    return sum(len(it.token_ids) for it in batch.items if not it.seq.in_decode)


def sessions_held(pools: list[Rank], retained_on: dict[str, Rank]) -> int:
    """Sessions held: live sessions (a turn still to come) whose whole context is in device KV.
    Either a turn of theirs is decoding (its prompt all computed, on the device), or the path their
    last finished turn cached ends on the device of the rank that ran it, under its retention TTL
    (every whole page resident; a partly filled last page may have spilled). A turn waiting, or
    prefilling on top of that resident path, keeps its session held; one that lost it (evicted,
    or a turn sent to another rank) is held again once it decodes.
    retained_on: live session id -> the pool its last finished turn ran on."""
    held = {s.request_id.rpartition(":")[0] for r in pools for s in r.sched.running if s.in_decode}
    resident = {id(r): set(r.cache.resident_sessions()) for r in pools}
    held.update(sid for sid, r in retained_on.items() if sid in resident[id(r)])
    return len(held)


@functools.lru_cache(maxsize=4096)
def _materialize(session_json: str) -> list[tuple[list[int], list[int]]]:
    """Token ids of every turn, hashed once per session however many policies replay it."""
    return load_trace_module().materialize(json.loads(session_json), VOCAB)


def replay(sessions: list[dict], policy: str, node) -> dict:
    """Replay `sessions` on `node` (OneRank, or agent_cache_dp.DPNode). policy: a row label; lru
    and unbounded send no session ids (no retention)."""
    now, pools, page_size = node.now, node.pools, node.page_size

    arrivals: list[tuple[float, int, int]] = []  # (time, session index, turn index)
    turns = {}
    for i, s in enumerate(sessions):
        turns[i] = _materialize(json.dumps(s, sort_keys=True))
        heapq.heappush(arrivals, (s["arrival_s"], i, 0))
    live: dict[int, tuple] = {}  # id(seq) -> (session, turn, arrival, outputs, pool)
    totals = dict(prompt=0, device=0, host=0)
    late_ttft: list[float] = []
    # Working set = the peak, over time, of the contexts of live sessions (shared prefixes once).
    context: dict[int, int] = {}
    retained_on: dict[str, Rank] = {}  # live session -> the pool its last finished turn ran on
    peak_live = peak_sessions = 0
    held_time = 0.0  # integral of sessions held over virtual time, while sessions still arrive
    last_arrival = max(s["arrival_s"] for s in sessions)

    def advance(seconds: float) -> None:
        nonlocal peak_sessions, held_time
        held = sessions_held(pools, retained_on)
        peak_sessions = max(peak_sessions, held)
        held_time += held * max(0.0, min(seconds, last_arrival - now[0]))
        now[0] += seconds

    while arrivals or any(r.sched.has_work() for r in pools):
        while arrivals and arrivals[0][0] <= now[0]:
            t, i, k = heapq.heappop(arrivals)
            prompt, output = turns[i][k]
            seq = Sequence(f"{sessions[i]['session_id']}:{k}", prompt, SamplingParams(max_tokens=len(output)),
                           session_id=sessions[i]["session_id"] if policy not in ("lru", "unbounded") else None)
            pool = node.place(i)
            live[id(seq)] = (i, k, t, output, pool)
            context[i] = len(prompt) + len(output)
            groups = {sessions[j]["system_group"]: sessions[j]["system_tokens"] for j in context}
            peak_live = max(peak_live, sum(context.values()) - sum(
                (sum(1 for j in context if sessions[j]["system_group"] == g) - 1) * n for g, n in groups.items()))
            pool.sched.add(seq)
        if not any(r.sched.has_work() for r in pools):
            advance(arrivals[0][0] - now[0])
            continue
        steps = []
        for r in pools:
            if r.sched.has_work():
                batch = r.sched.schedule()
                if batch is None:  # waiting on capacity that nothing running will free: cannot happen
                    raise RuntimeError("scheduler made no progress")
                steps.append((r.sched, batch))
        # One step for the whole node (DP ranks meet in every MoE layer: the slowest rank's step).
        advance(node.step_time([b for _, b in steps]))
        for sched, batch in steps:
            for it in batch.items:
                seq = it.seq
                was_prefill = not seq.in_decode
                seq.num_computed += len(it.token_ids)
                if was_prefill:
                    sched.cache_prefix(seq)  # as the engine does after every prefill chunk
                if it.num_logits == 0:
                    continue
                i, k, t_arrival, output, pool = live[id(seq)]
                if seq.num_output == 0:  # its first token (a resumed sequence keeps its outputs)
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
                        retained_on[sessions[i]["session_id"]] = pool
                    else:
                        del context[i]
                        retained_on.pop(sessions[i]["session_id"], None)
    hits = totals["device"] + totals["host"]
    late_ttft.sort()
    caches = [r.cache for r in pools]
    return {
        "policy": policy,
        "sessions": len(sessions),
        "ranks": len(pools),
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
        # Time-weighted, until the last session arrives (after it the offered load only drains).
        "sessions_held_mean": round(held_time / max(1e-9, last_arrival - min(s["arrival_s"] for s in sessions)), 1),
        "peak_live_tokens": peak_live,
        "virtual_time_s": round(now[0], 1),
    }


def main(argv: list[str] | None = None) -> int:
    from benchmarks import agent_cache_dp  # it imports this module: here, not at the top

    argv = sys.argv[1:] if argv is None else argv
    if any(arg == "--model" or arg.startswith("--model=") for arg in argv):
        from benchmarks.agent_cache_flash import run as run_flash

        return run_flash(argv, load_trace_module(), lambda sessions, page_size: replay(
            sessions, "unbounded", OneRank(unbounded_capacity(sessions), 0, page_size, 0.0, CostModel())
        )["peak_live_tokens"])
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--trace", help="JSONL trace file (default: generate one in-process)")
    p.add_argument("--sessions", type=int, default=64)
    p.add_argument("--concurrency", type=int, default=16)
    p.add_argument("--scale", type=float, default=0.1)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--page-size", type=int, default=64)
    p.add_argument("--ttl", type=float, default=120.0, help="session retention TTL (virtual seconds)")
    agent_cache_dp.add_arguments(p)
    p.add_argument("--quick", action="store_true", help="small trace for CI")
    a = p.parse_args(argv)
    if a.quick:
        a.sessions, a.concurrency, a.scale = 12, 6, 0.03
    trace_module = load_trace_module()
    if a.trace:
        with open(a.trace) as f:
            sessions = [json.loads(line) for line in f if line.strip()]
    elif a.dp:
        sessions = None  # sized by agent_cache_dp from the node's KV
    else:
        sessions = list(trace_module.generate(a.sessions, a.concurrency, a.scale, 1.0, 1, a.seed))
    if a.dp:
        return agent_cache_dp.run(a, trace_module, sessions)
    cost = CostModel()
    # The working set is measured, not guessed: the peak live context of an unbounded replay.
    ws = replay(sessions, "unbounded", OneRank(unbounded_capacity(sessions), 0, a.page_size, a.ttl, cost))[
        "peak_live_tokens"]
    device = ws // 2
    print(f"# {len(sessions)} sessions, {a.concurrency} concurrent, working set {ws} tokens: "
          f"device {device}, host {ws - device}, page {a.page_size}", flush=True)
    results = {}
    for policy, host, ttl in (("lru", 0, 0.0), ("horizon", ws - device, a.ttl)):
        r = replay(sessions, policy, OneRank(device, host, a.page_size, ttl, cost))
        results[policy] = r
        print(json.dumps(r), flush=True)
    ours, lru = results["horizon"], results["lru"]
    print(json.dumps({"comparison": {
        "hit_rate": ours["hit_rate"], "lru_hit_rate": lru["hit_rate"],
        "recompute_reduction_vs_lru": round(lru["recomputed_tokens"] / max(1, ours["recomputed_tokens"]), 2),
        "late_ttft_speedup_vs_lru": round(lru["late_turn_ttft_mean_s"] / max(1e-9, ours["late_turn_ttft_mean_s"]), 2),
        "unbounded_hit_rate": trace_module.describe(sessions)["unbounded_cache_hit_rate"],
    }}), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
