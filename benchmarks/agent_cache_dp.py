"""DP-attention against TP on agent traces: the node's KV from the memory plan, sessions held at once.

`benchmarks/agent_cache.py --dp N` replays one agent trace (../shared/traces/) three ways on one
node, through the engine's own scheduler, radix cache and host tier (agent_cache.replay):
- tp-replicated: tensor-parallel attention. MLA has one latent head, so every TP rank holds every
  sequence's KV and the node is one pool of what one rank holds.
- dp-affinity: N data-parallel attention ranks, each with its own scheduler, radix cache and host
  tier over 1/N of the node's DP KV. A session's first turn goes to the rank whose unfinished
  sessions need the fewest KV tokens (ties: fewer sessions so far), every later turn to the same
  rank, where its prefix, retention and host pages are.
- dp-random: the same ranks, every turn to a random one.

Budgets come from the memory plan, not from a knob: `horizon model plan glm-5.3 --gpu-memory
143771MiB --dp-attention` (H200s as nvidia-smi reports them, memory fraction 0.9, FP8 KV) gives
TP8 601,056 KV tokens per rank (= per node) and DP8 + EP8, in the layout the engine serves by
default (--dp-extras split: embedding, LM head, dense and shared MLPs split over the ranks),
373,703 per rank (2,989,624 per node, 4.97x); with those replicated (--dp-extras replicated)
256,101 per rank (2,048,808, 3.41x). Both are multiplied by one common factor, the trace's token
scale (--scale 0.1 turns a 12K->80K-token session into 1.2K->8K, so the node shrinks with it),
and DP's node total is split
evenly over the N ranks. The host tier is the same for every policy: --host-memory of node RAM
(default 1 TiB, half a DGX H200's) in KV tokens, scaled alike: one tier under TP, 1/N per DP rank.
A DP rank's per-step token and request limits are the node's divided by N, as SGLang divides
--chunked-prefill-size and --max-running-requests under --enable-dp-attention.

Trace: --dp-load L offers L x the DP node's KV in live context: concurrency = L x DP node tokens /
the mean context of a live session (time-weighted over tool calls), 2 x concurrency sessions. The
default 1.5 offers TP about 7.5x what it holds (5x with replicated extras) and DP 1.5x, so capacity
decides residency under both.
The fleet is already at work when the replay starts: the first wave joins mid-session (a random
number of its turns folded into its first prompt). Starting from an idle node instead, the first
minute would see a wave of brand-new short sessions that TP holds almost all of, and the peak would
measure that transient, not the layouts. A session lives on one DP rank, so sessions are cut at
the last turn that fits one rank's KV (an agent compacts at its serving limit); the header says
how many. With --trace FILE the file is replayed as it is (--scale must be its token scale).

`concurrent_sessions` = the most sessions held at once, sampled at every engine step. A session is
*held* while it has a turn still to come and its whole context is in device KV: a turn of it is
decoding, or the path its last finished turn cached ends on the device of the rank that ran it,
under its retention TTL (agent_cache.sessions_held has the exact rule). `sessions_held_mean` is
the time-weighted mean until the last session arrives. Rows also report late-turn TTFT (turns in
a session's second half), recomputed tokens and hit rates (device + host).

Step time: a decode step costs the same under both layouts. Prefill and restores cost what the
cost model says for the TP node; DP ranks run in lockstep (they meet in every MoE layer), so a
step lasts as long as its slowest rank's: each rank's own work (attention, and with replicated
extras the dense and shared MLPs and the head: `attention_share` of a token's FLOPs) runs on one
GPU, at 1/N of the node's rate, while the routed experts (and split extras) serve the node's
tokens on every GPU at the node's rate. Each rank restores over its own host link, as each TP
rank does.
"""

from __future__ import annotations

import argparse
import functools
import json
import math
import random
import sys
from dataclasses import asdict, dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from benchmarks.agent_cache import CostModel, OneRank, Rank, prefill_tokens, replay  # noqa: E402
from inference.engine.scheduler import ScheduledBatch  # noqa: E402

GLM53_CONFIG = REPO / "inference" / "configs" / "glm-5.3-fp8.json"
PLAN_GPUS = 8
# NOTE: GLM-5.3's active parameters per token (billions): attention projections 12.9, the sparse
# attention core ~11 (its FLOPs at 2,048 top-k keys), dense and shared MLPs 3.5, head 1, the 8
# routed experts 23. A DP rank runs attention alone on its own tokens; split extras run on every
# rank's tokens like the routed experts, replicated ones on the rank's own.
_ATTENTION, _EXTRAS, _EXPERTS = 12.9 + 11, 3.5 + 1, 23


def attention_share(extras: str) -> float:
    """The part of a prefill token's FLOPs that a DP rank runs alone, on its own GPU."""
    own = _ATTENTION + (_EXTRAS if extras == "replicated" else 0)
    return own / (_ATTENTION + _EXTRAS + _EXPERTS)


QUICK_LOAD = 0.5


@dataclass(frozen=True)
class NodeBudgets:
    """KV tokens each policy gets, after the common scale factor (device per pool, host per pool)."""

    scale: float
    ranks: int
    extras: str  # the DP layout's extras: "split" (the engine's default) or "replicated"
    tp_device: int
    tp_host: int
    dp_device_per_rank: int
    dp_host_per_rank: int
    plan_tp_tokens: int  # unscaled: GLM-5.3 on 8xH200, TP8, per rank = per node
    plan_dp_tokens_per_node: int  # unscaled: DP8 + EP8, all ranks

    @property
    def dp_node_tokens(self) -> int:
        return self.dp_device_per_rank * self.ranks


def node_budgets(scale: float, ranks: int, page_size: int, gpu_memory: str = "143771MiB",
                 host_memory: str = "1TiB", extras: str = "split") -> NodeBudgets:
    """Scale GLM-5.3's 8xH200 plan (TP8 vs DP8 + EP8 with `extras`) down to the trace by its token scale."""
    from inference.memory_plan import parse_bytes

    if ranks < 1:
        raise ValueError(f"--dp {ranks}: expected at least 1 rank")
    if not 0 < scale <= 1:
        raise ValueError(f"--scale {scale}: expected a token scale in (0, 1]")
    p = _glm53_plan(parse_bytes(gpu_memory))
    dp_node = p.dp_layout(extras).kv_tokens_per_node
    host = parse_bytes(host_memory) // p.kv_bytes_per_token

    def pages(tokens: float) -> int:
        return int(tokens) // page_size * page_size

    return NodeBudgets(scale, ranks, extras, pages(scale * p.kv_tokens), pages(scale * host),
                       pages(scale * dp_node / ranks), pages(scale * host / ranks), p.kv_tokens, dp_node)


@functools.lru_cache(maxsize=4)
def _glm53_plan(gpu_memory_bytes: int):
    """GLM-5.3 on 8 GPUs, TP8 and both DP layouts (one plan serves either --dp-extras)."""
    from inference.config import ModelConfig
    from inference.memory_plan import plan

    return plan(ModelConfig.from_pretrained(GLM53_CONFIG), PLAN_GPUS, gpu_memory_bytes, dp_attention=True)


class DPNode:
    """N data-parallel attention ranks of one node, as agent_cache.replay drives them."""

    def __init__(self, sessions: list[dict], ranks: int, device_tokens: int, host_tokens: int, page_size: int,
                 ttl_s: float, cost: CostModel, affinity: bool, seed: int = 0, extras: str = "split"):
        self.sessions = sessions
        self.page_size = page_size
        self.now = [0.0]
        self.pools = [Rank(device_tokens, host_tokens, page_size, ttl_s, self.now, ranks) for _ in range(ranks)]
        self.cost = cost
        self.own_share = attention_share(extras)
        self.affinity = affinity
        self.rng = random.Random(seed)
        self.home: dict[int, int] = {}  # session -> its rank (affinity)
        self.homed = [0] * ranks  # sessions placed on each rank so far
        self.context: dict[int, int] = {}  # session with turns to come -> the context its latest turn needs
        self.turns_placed: dict[int, int] = {}
        self.turn_ranks: dict[int, set[int]] = {}  # session -> every rank one of its turns ran on

    def load(self, r: int) -> int:
        """KV tokens rank r's unfinished sessions need now (their latest turns' prompts and outputs):
        what placement balances. Free pages say little here: a busy rank's cache is always full."""
        return sum(self.context[i] for i, home in self.home.items() if home == r and i in self.context)

    def place(self, session: int) -> Rank:
        k = self.turns_placed.get(session, 0)
        self.turns_placed[session] = k + 1
        s = self.sessions[session]
        if k + 1 < len(s["turns"]):
            self.context[session] = s["system_tokens"] + s["task_tokens"] + s["turns"][k]["output_tokens"] + sum(
                t["output_tokens"] + t["observation_tokens"] for t in s["turns"][:k])
        else:
            self.context.pop(session, None)  # its last turn: nothing more to come
        if not self.affinity:
            r = self.rng.randrange(len(self.pools))
        elif session in self.home:
            r = self.home[session]
        else:
            r = min(range(len(self.pools)), key=lambda j: (self.load(j), self.homed[j]))
            self.home[session] = r
            self.homed[r] += 1
        self.turn_ranks.setdefault(session, set()).add(r)
        return self.pools[r]

    def step_time(self, batches: list[ScheduledBatch]) -> float:
        n = len(self.pools)
        prefill = [prefill_tokens(b) for b in batches]
        # Prefill at node-rate equivalents: the slowest rank's attention side on one GPU (n x
        # slower than the node), the experts over all of the node's tokens.
        equivalent = self.own_share * n * max(prefill) + (1 - self.own_share) * sum(prefill)
        restored = max(b.restored_pages for b in batches) * self.page_size
        return self.cost.step(0, restored) + equivalent / self.cost.prefill_tok_s


def mean_live_context(sessions: list[dict]) -> float:
    """A live session's context at a random moment: each turn's prompt + output, weighted by the
    tool time it waits through (where agent sessions spend nearly all of their time)."""
    held = weight = 0.0
    for s in sessions:
        context = s["system_tokens"] + s["task_tokens"]
        for t in s["turns"][:-1]:
            context += t["output_tokens"]
            held += context * t["tool_s"]
            weight += t["tool_s"]
            context += t["observation_tokens"]
    return held / max(weight, 1e-9)


def fit_context(sessions: list[dict], limit: int) -> tuple[list[dict], int]:
    """Sessions cut at the last turn whose prompt + output fits `limit` tokens, and how many were
    cut. Under DP attention a session's KV lives on one rank, so the serving limit on its context
    is one rank's KV; an agent at that limit compacts its context and starts afresh."""
    out, cut = [], 0
    for s in sessions:
        context, turns = s["system_tokens"] + s["task_tokens"], []
        for t in s["turns"]:
            if context + t["output_tokens"] > limit:
                if not turns:
                    raise ValueError(f"session {s['session_id']}: its first turn needs {context + t['output_tokens']} "
                                     f"KV tokens, more than one rank's {limit}; use fewer ranks")
                break
            turns.append(t)
            context += t["output_tokens"] + t["observation_tokens"]
        cut += len(turns) < len(s["turns"])
        out.append({**s, "turns": turns})
    return out, cut


def warm_start(sessions: list[dict], first_wave: int, seed: int) -> list[dict]:
    """The first wave joins mid-way, as a working fleet's sessions would be found: each of the
    first `first_wave` sessions starts at a random turn, the turns before it folded into its first
    prompt (task tokens). Later sessions start at their beginning."""
    rng = random.Random(seed)
    out = []
    for i, s in enumerate(sessions):
        skip = rng.randrange(len(s["turns"])) if i < first_wave else 0
        folded = sum(t["output_tokens"] + t["observation_tokens"] for t in s["turns"][:skip])
        out.append({**s, "task_tokens": s["task_tokens"] + folded, "turns": s["turns"][skip:]})
    return out


def dp_trace(traces, budgets: NodeBudgets, load: float, scale: float, seed: int, limit: int,
             waves: int = 2) -> tuple[list[dict], int, int]:
    """A trace offering `load` x the DP node's KV in live context, already at work: (sessions,
    concurrency, sessions cut at `limit`), `waves` x concurrency sessions. Session i's content
    depends on the seed and i only, so a probe of 64 sessions sizes the real one."""
    if load <= 0:
        raise ValueError(f"--dp-load {load}: expected a positive multiple of the DP node's KV")
    context = mean_live_context(list(traces.generate(64, 16, scale, 1.0, 1, seed)))
    concurrency = max(2, math.ceil(load * budgets.dp_node_tokens / context))
    sessions, cut = fit_context(list(traces.generate(waves * concurrency, concurrency, scale, 1.0, 1, seed)), limit)
    return warm_start(sessions, concurrency, seed), concurrency, cut


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--dp", type=int, default=0, help="compare TP (tp-replicated) with N DP-attention ranks "
                   "(dp-affinity, dp-random) instead; the trace is sized by --dp-load unless --trace is given")
    p.add_argument("--dp-load", type=float, default=1.5,
                   help="with --dp: live context offered, as a multiple of the DP node's KV (TP holds 1/5 of it)")
    p.add_argument("--dp-extras", choices=["split", "replicated"], default="split",
                   help="with --dp: the DP layout's embedding, head, dense and shared MLPs: split over the ranks "
                   "(the engine's default) or replicated (less KV per rank)")
    p.add_argument("--gpu-memory", default="143771MiB", help="with --dp: memory per GPU for the GLM-5.3 plan "
                   "(an H200 as nvidia-smi reports it)")
    p.add_argument("--host-memory", default="1TiB", help="with --dp: node RAM for the host KV tier (all policies)")


def run(a: argparse.Namespace, traces, sessions: list[dict] | None) -> int:
    """The three rows and a comparison line. sessions: a --trace file's, or None to size one."""
    try:
        budgets = node_budgets(a.scale, a.dp, a.page_size, a.gpu_memory, a.host_memory, a.dp_extras)
        # A page of slack: a turn's last page may be a private copy of a cached partial page.
        limit = budgets.dp_device_per_rank - a.page_size
        if sessions is None:
            # --quick (CI): one wave at a load that keeps the run short; TP is still offered more than it holds.
            load, waves = (QUICK_LOAD, 1) if a.quick else (a.dp_load, 2)
            sessions, concurrency, cut = dp_trace(traces, budgets, load, a.scale, a.seed, limit, waves)
        else:
            (sessions, cut), concurrency = fit_context(sessions, limit), "as in the file"
    except ValueError as exc:
        print(f"agent_cache --dp: {exc}", file=sys.stderr)
        return 2
    print(f"# DP: {len(sessions)} sessions ({cut} cut at one rank's KV), concurrency {concurrency}; "
          + json.dumps({"budgets": asdict(budgets)}), flush=True)
    cost = CostModel()
    rows = {
        "tp-replicated": replay(sessions, "tp-replicated",
                                OneRank(budgets.tp_device, budgets.tp_host, a.page_size, a.ttl, cost)),
    }
    for policy, affinity in (("dp-affinity", True), ("dp-random", False)):
        node = DPNode(sessions, a.dp, budgets.dp_device_per_rank, budgets.dp_host_per_rank, a.page_size, a.ttl, cost,
                      affinity, a.seed, a.dp_extras)
        rows[policy] = replay(sessions, policy, node)
        rows[policy]["max_ranks_per_session"] = max(len(r) for r in node.turn_ranks.values())
    for r in rows.values():
        print(json.dumps(r), flush=True)
    tp, aff, rnd = rows["tp-replicated"], rows["dp-affinity"], rows["dp-random"]
    print(json.dumps({"dp_comparison": {
        "ranks": a.dp, "dp_extras": a.dp_extras,
        "capacity_ratio": round(aff["capacity_tokens"] / tp["capacity_tokens"], 2),
        "dp_affinity_hit_rate": aff["hit_rate"], "dp_random_hit_rate": rnd["hit_rate"], "tp_hit_rate": tp["hit_rate"],
        "concurrent_sessions_vs_tp": round(aff["concurrent_sessions"] / max(1, tp["concurrent_sessions"]), 2),
        "sessions_held_mean_vs_tp": round(aff["sessions_held_mean"] / max(1e-9, tp["sessions_held_mean"]), 2),
        "affinity_recompute_reduction_vs_random": round(rnd["recomputed_tokens"] / max(1, aff["recomputed_tokens"]), 2),
        "late_ttft_speedup_vs_tp": round(tp["late_turn_ttft_mean_s"] / max(1e-9, aff["late_turn_ttft_mean_s"]), 2),
    }}), flush=True)
    return 0
