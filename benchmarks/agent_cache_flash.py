"""agent_cache.py for a GLM-5.3-Flash checkpoint: agent sessions through the real engine and model,
KDA state snapshots on vs off, in one run.

A Flash prefix hit needs the KDA state at the matched position, so without snapshots every prompt
is recomputed from token 0 (`snapshots-off`: what the engine did before they existed). With them
(`snapshots-on`: the radix cache, host tier and session retention of agent_cache.py's `horizon`
policy, plus snapshots taking `--snapshot-fraction` of each budget) a session's next turn resumes
where its last one stopped. Unlike agent_cache.py's cost model, the model runs for real (fp32,
CPU): the replay follows the trace's rules with the model's own greedy outputs in the prompts
(turn k+1 = turn k's prompt + what the model generated + the tool's observation), so both runs
must produce identical tokens; it reports the prompt tokens hit and recomputed, and the CPU
seconds the engine steps took. Virtual time: a turn arrives its tool time after the previous one
finished, engine steps advance the clock by the CPU time they took (session TTLs run on it).

    python benchmarks/agent_cache.py --model flash-tiny            # a random flash-tiny checkpoint
    python benchmarks/agent_cache.py --model /path/to/flash/ckpt --sessions 8 --max-turns 12
    python benchmarks/agent_cache.py --model flash-tiny --quick
"""

from __future__ import annotations

import argparse
import heapq
import json
import sys
import tempfile
import time
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from inference.engine import Engine, EngineConfig, GenerateRequest, SamplingParams  # noqa: E402
from inference.glm5_next.config import Glm5NextTextConfig  # noqa: E402
from inference.glm5_next.describe import is_flash_checkpoint, kv_bytes_per_token  # noqa: E402
from inference.glm5_next.random_checkpoint import FLASH_PRESETS, write_flash_checkpoint  # noqa: E402


def checkpoint(model: str, tmp: Path) -> Path:
    """A preset name -> a random checkpoint of it (fp32, seed 0); anything else must be a Flash checkpoint."""
    if model in FLASH_PRESETS:
        return write_flash_checkpoint(tmp / model, model, seed=0, dtype=torch.float32)
    path = Path(model)
    if not is_flash_checkpoint(path):
        raise SystemExit(f"--model {model!r}: neither a preset ({', '.join(sorted(FLASH_PRESETS))}) nor a "
                         "GLM-5.3-Flash checkpoint directory")
    return path


def turn_inputs(session: dict, vocab: int, trace_module) -> tuple[list[int], list[tuple[int, list[int]]]]:
    """(turn 0's prompt, per turn (output tokens, observation ids that follow the output))."""
    turns = trace_module.materialize(session, vocab)
    steps = []
    for k, (prompt, output) in enumerate(turns):
        after = turns[k + 1][0][len(prompt) + len(output):] if k + 1 < len(turns) else []
        steps.append((len(output), after))
    return turns[0][0], steps


def replay(ckpt: Path, sessions: list[dict], config: EngineConfig, trace_module) -> tuple[dict, dict]:
    """-> (the policy's row, each turn's generated tokens by (session, turn))."""
    now = [0.0]
    eng = Engine(ckpt, config, clock=lambda: now[0])
    torch.set_num_threads(1)
    inputs = [turn_inputs(s, eng.model_config.vocab_size, trace_module) for s in sessions]
    arrivals = [(s["arrival_s"], i, 0) for i, s in enumerate(sessions)]
    heapq.heapify(arrivals)
    prompts = {i: inputs[i][0] for i in range(len(sessions))}
    live: dict[str, tuple[int, int, object]] = {}
    outputs: dict[tuple[int, int], list[int]] = {}
    totals = dict(prompt=0, device=0, host=0)
    compute = 0.0
    while arrivals or live:
        while arrivals and arrivals[0][0] <= now[0]:
            _, i, k = heapq.heappop(arrivals)
            n_out = inputs[i][1][k][0]
            req = GenerateRequest(prompt_ids=prompts[i], session_id=sessions[i]["session_id"], request_id=f"{i}:{k}",
                                  params=SamplingParams(temperature=0.0, max_tokens=n_out, ignore_eos=True))
            live[req.request_id] = (i, k, eng.submit(req))
        if not live:
            now[0] = arrivals[0][0]
            continue
        t = time.process_time()
        eng.step()
        step_s = time.process_time() - t
        compute += step_s
        now[0] += step_s
        for rid, (i, k, handle) in list(live.items()):
            if rid in eng._live:
                continue
            r = handle.result()  # finished: its deltas are queued, nothing runs
            del live[rid]
            outputs[i, k] = r.token_ids
            totals["prompt"] += r.usage.prompt_tokens
            totals["device"] += r.usage.cached_tokens_device
            totals["host"] += r.usage.cached_tokens_host
            if k + 1 < len(inputs[i][1]):
                prompts[i] = prompts[i] + r.token_ids + inputs[i][1][k][1]
                heapq.heappush(arrivals, (now[0] + sessions[i]["turns"][k]["tool_s"], i, k + 1))
    stats = eng.stats()
    hits = totals["device"] + totals["host"]
    row = {
        "policy": "snapshots-on" if config.enable_prefix_cache else "snapshots-off",
        "sessions": len(sessions), "prompt_tokens": totals["prompt"], "hit_tokens": hits,
        "hit_rate": round(hits / max(1, totals["prompt"]), 4),
        "device_hit_tokens": totals["device"], "host_hit_tokens": totals["host"],
        "recomputed_tokens": totals["prompt"] - hits,
        "capacity_tokens": eng.num_device_pages * config.page_size,
        "host_capacity_tokens": eng.host.allocator.num_pages * config.page_size,
        "compute_cpu_s": round(compute, 3), "preemptions": stats["preemptions"], "steps": stats["steps"],
        "state_snapshots": stats.get("state_snapshots"),
    }
    return row, outputs


def run(argv: list[str], trace_module, unbounded_working_set) -> int:
    p = argparse.ArgumentParser(description="agent_cache.py --model: a GLM-5.3-Flash checkpoint, snapshots on vs off")
    p.add_argument("--model", required=True, help=f"a preset ({', '.join(sorted(FLASH_PRESETS))}) or a checkpoint path")
    p.add_argument("--trace", help="JSONL trace file (default: generate one in-process)")
    p.add_argument("--sessions", type=int, default=8)
    p.add_argument("--concurrency", type=int, default=4)
    p.add_argument("--scale", type=float, default=0.02, help="token scale of a generated trace (the model runs on CPU)")
    p.add_argument("--max-turns", type=int, default=12, help="cut every session to its first N turns")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--page-size", type=int, default=16)
    p.add_argument("--ttl", type=float, default=120.0, help="session retention TTL (virtual seconds)")
    p.add_argument("--snapshot-fraction", type=float, default=None,
                   help="share of the KV and host budgets that holds KDA state snapshots (default: EngineConfig's, "
                        "0.5 with --quick, whose tiny contexts are short next to a snapshot)")
    p.add_argument("--quick", action="store_true", help="a few short sessions, for CI")
    a = p.parse_args(argv)
    if a.quick:
        a.sessions, a.concurrency, a.scale, a.max_turns = 2, 2, 0.01, 3
    if a.snapshot_fraction is None:
        a.snapshot_fraction = 0.5 if a.quick else EngineConfig.model_fields["state_snapshot_fraction"].default
    if a.trace:
        with open(a.trace) as f:
            sessions = [json.loads(line) for line in f if line.strip()]
    else:
        sessions = list(trace_module.generate(a.sessions, a.concurrency, a.scale, 1.0, 1, a.seed))
    sessions = [dict(s, turns=s["turns"][:a.max_turns]) for s in sessions]
    longest = max(s["system_tokens"] + s["task_tokens"] + sum(t["output_tokens"] + t["observation_tokens"]
                                                              for t in s["turns"]) for s in sessions)
    ws = unbounded_working_set(sessions, a.page_size)
    with tempfile.TemporaryDirectory() as tmp:
        ckpt = checkpoint(a.model, Path(tmp))
        config = Glm5NextTextConfig.from_pretrained(ckpt)
        snapshot_tokens = -(-config.kda_state_bytes_per_sequence // kv_bytes_per_token(config, 4))
        # As agent_cache.py: the device holds half the working set, the host the rest (at least half
        # again); but a session must fit the device's pages beside the snapshots, and every
        # concurrent session must be able to keep one snapshot there.
        device = max(ws // 2, int((longest + 4 * a.page_size) / (1 - a.snapshot_fraction)),
                     int(a.concurrency * snapshot_tokens / a.snapshot_fraction) + a.page_size)  # + page rounding
        host = max(ws - device, ws // 2)
        print(f"# {a.model}: {len(sessions)} sessions, <= {a.max_turns} turns, working set {ws} tokens, longest "
              f"{longest}, a KDA state snapshot = {snapshot_tokens} tokens of KV: device {device}, host {host}, "
              f"page {a.page_size}, snapshots {a.snapshot_fraction:.0%} of each budget", flush=True)
        common = dict(dtype="float32", kv_budget_tokens=device, page_size=a.page_size, max_batch_tokens=1024,
                      chunk_size=512, max_running=max(4, a.concurrency), session_ttl_s=a.ttl)
        off, off_tokens = replay(ckpt, sessions, EngineConfig(**common, enable_prefix_cache=False), trace_module)
        print(json.dumps(off), flush=True)
        on_config = EngineConfig(**common, enable_prefix_cache=True, host_budget_tokens=host,
                                 state_snapshot_fraction=a.snapshot_fraction)
        on, on_tokens = replay(ckpt, sessions, on_config, trace_module)
        print(json.dumps(on), flush=True)
    print(json.dumps({"flash_comparison": {
        "hit_rate": on["hit_rate"], "hit_rate_without_snapshots": off["hit_rate"],
        "recompute_reduction": round(off["recomputed_tokens"] / max(1, on["recomputed_tokens"]), 2),
        "compute_speedup": round(off["compute_cpu_s"] / max(1e-9, on["compute_cpu_s"]), 2),
        "outputs_identical": on_tokens == off_tokens,
        "unbounded_hit_rate": trace_module.describe(sessions)["unbounded_cache_hit_rate"],
    }}), flush=True)
    return 0
