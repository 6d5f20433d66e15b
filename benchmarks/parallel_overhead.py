#!/usr/bin/env python3
"""What tensor parallelism (or, with --dp-attention, DP attention) costs on this machine:
Engine(TP=2) or Engine(DP=2) vs Engine(TP=1), and the bytes its collectives move per step.

Both engines run the same greedy requests with the prefix cache off: a prefill of --prompt
tokens, and decode at batch 1 and --batch. TP=1 runs with 2 threads, TP=2 with one per rank
(the same cores), times are wall clock (two processes), best of --reps. On a 2-core CPU TP=2 is
expected to be slower (gloo over loopback costs ms per collective: ../shared/docs/scaleout.md
§4.7); the benchmark exists to pin the counts and make the communication cost visible, which on
NVLink is microseconds.

Printed per phase: seconds per step for each, their ratio, and per TP=2 step the collectives,
bytes all-reduced and gathered, and control-plane commands; plus the bytes the same step would
all-reduce at GLM-5.3's real shape (78 layers x 2 all-reduces x tokens x 6144 x 4 B, the bf16
model's partial sums reduced in fp32, or 2 B with --reduce-dtype model; plus the embedding's in
bf16 and the logits gather).

DP attention (--dp-attention): each rank runs its own requests (a batch-1 phase leaves rank 1
idle: it serves its experts and slices), and per MoE layer the ranks' tokens are all-gathered and
the sums reduce-scattered back; the step command carries the token counts and ids, so no other
collective sizes anything. With the default split extras (--dp-extras split) the embedding adds a
reduce-scatter, each dense layer an all-gather and a reduce-scatter, and the LM head an all-gather
of the logit rows before its gather of vocab slices to rank 0; with replicated extras the logits
are gathered whole instead. GLM-5.3 bytes (`real_dp_bytes_per_step`, the payload rank 0 passes to
its collectives, at the measured step's per-rank token and logit-row counts over --dp ranks).

    python benchmarks/parallel_overhead.py                  # small preset, TP=2
    python benchmarks/parallel_overhead.py --dp-attention   # small preset, DP=2, split extras
    python benchmarks/parallel_overhead.py --dp-attention --dp-extras replicated
    python benchmarks/parallel_overhead.py --quick          # tiny preset, a few tokens (CI)
    python benchmarks/parallel_overhead.py --quick --dtype bfloat16 [--reduce-dtype model]
                                                            # bf16: partial sums reduced in fp32 (2x bytes) or bf16
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from inference.engine import Engine, EngineConfig, GenerateRequest, SamplingParams  # noqa: E402
from inference.random_checkpoint import write_random_checkpoint  # noqa: E402

REAL = dict(layers=78, moe_layers=75, dense_layers=3, hidden=6144, vocab=154880, bytes=2)


def real_bytes_per_step(tokens: int, logit_rows: int, reduce_fp32: bool = True) -> int:
    """All-reduce + gather payload of one GLM-5.3 forward (bf16 activations), as counted on the
    leader: the layers' partial sums travel in fp32 unless reduced in the model dtype."""
    layer_bytes = 4 if reduce_fp32 else REAL["bytes"]
    all_reduce = (2 * REAL["layers"] * layer_bytes + REAL["bytes"]) * tokens * REAL["hidden"]
    gather = logit_rows * (REAL["vocab"] // 8) * REAL["bytes"]
    return all_reduce + gather


def real_dp_bytes_per_step(busiest: int, logit_rows: int, ranks: int = 2, reduce_fp32: bool = True,
                           split_extras: bool = True) -> int:
    """DP attention, one GLM-5.3 target forward (bf16 activations): the payload one rank passes to
    its collectives. busiest / logit_rows: the largest rank's tokens and logit rows (every rank's
    block is padded to them). Each exchanging layer all-gathers [busiest, H] in bf16 and
    reduce-scatters [ranks x busiest, H] partial sums (fp32 unless reduced in the model dtype).
    Replicated extras: the MoE layers exchange, the logits [logit_rows, V] are gathered whole.
    Split extras: the dense layers exchange too, the embedding reduce-scatters [ranks x busiest, H]
    in bf16 (exact: one non-zero addend per row), the head all-gathers its [logit_rows, H] rows and
    gathers [ranks x logit_rows, V / ranks] vocab slices."""
    h, b = REAL["hidden"], REAL["bytes"]
    partial = 4 if reduce_fp32 else b
    layer = busiest * h * b + ranks * busiest * h * partial
    if not split_extras:
        return REAL["moe_layers"] * layer + logit_rows * REAL["vocab"] * b
    per = -(-REAL["vocab"] // ranks)
    embed = ranks * busiest * h * b
    head = logit_rows * h * b + ranks * logit_rows * per * b
    return embed + (REAL["moe_layers"] + REAL["dense_layers"]) * layer + head


def _requests(batch: int, length: int, new: int, vocab: int) -> list[GenerateRequest]:
    g = torch.Generator().manual_seed(batch * 1000 + length)
    ids = torch.randint(3, vocab - 1, (batch, length), generator=g).tolist()
    params = SamplingParams(temperature=0.0, max_tokens=new, ignore_eos=True)
    return [GenerateRequest(prompt_ids=p, params=params) for p in ids]


def _seconds(engine: Engine, batch: int, length: int, new: int) -> float:
    vocab = engine.model_config.vocab_size
    start = time.perf_counter()
    engine.generate(_requests(batch, length, new, vocab))
    return time.perf_counter() - start


def _stats(engine: Engine) -> dict:
    comm = engine.model.parallel.comm
    return {"calls": dict(comm.stats.calls), "bytes": dict(comm.stats.bytes),
            "commands": getattr(engine.runner, "commands_sent", 0), "steps": engine.num_steps}


def _delta(after: dict, before: dict) -> dict:
    sub = lambda a, b: {k: a.get(k, 0) - b.get(k, 0) for k in a}  # noqa: E731
    return {"calls": sub(after["calls"], before["calls"]), "bytes": sub(after["bytes"], before["bytes"]),
            "commands": after["commands"] - before["commands"], "steps": after["steps"] - before["steps"]}


def measure(engine: Engine, prompt: int, batch: int, new: int, reps: int) -> dict:
    """Per phase: best seconds per step, and the collectives of one such step (from the last rep)."""
    out = {}
    _seconds(engine, 2, 8, 3)  # warm-up: first-call allocations and lazy inits are not a step's cost
    for name, b, length in (("prefill", 1, prompt), ("decode_b1", 1, 16), (f"decode_b{batch}", batch, 16)):
        best = float("inf")
        for _ in range(reps):
            before = _stats(engine)
            first = _seconds(engine, b, length, 1)
            if name == "prefill":
                secs, steps = first, 1
                delta = _delta(_stats(engine), before)
            else:
                mid = _stats(engine)
                secs, steps = (_seconds(engine, b, length, 1 + new) - first) / new, new
                delta = _delta(_delta(_stats(engine), mid), _delta(mid, before))
            best = min(best, secs)
        per_step = {k: {op: v / steps for op, v in d.items()} for k, d in delta.items() if k in ("calls", "bytes")}
        out[name] = {"seconds_per_step": best, "tokens": b * (length if name == "prefill" else 1),
                     "per_step": per_step, "commands_per_step": delta["commands"] / steps}
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="tiny preset, short prompt, few tokens")
    ap.add_argument("--prompt", type=int, default=512)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--new-tokens", type=int, default=16)
    ap.add_argument("--reps", type=int, default=2)
    ap.add_argument("--dtype", choices=["float32", "bfloat16"], default="float32")
    ap.add_argument("--reduce-dtype", choices=["float32", "model"], default="float32",
                    help="TP=2's bf16 partial sums kept and reduced in fp32 (default) or in the model dtype")
    ap.add_argument("--dp-attention", action="store_true", help="DP=2 (DP attention) instead of TP=2")
    ap.add_argument("--dp-extras", choices=["split", "replicated"], default="split",
                    help="with --dp-attention: embedding, head, dense and shared MLPs split over the ranks or "
                    "replicated")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    two_name = "dp2" if args.dp_attention else "tp2"
    preset = "tiny" if args.quick else "small"
    prompt, new, reps = (32, 4, 1) if args.quick else (args.prompt, args.new_tokens, args.reps)
    with tempfile.TemporaryDirectory() as tmp:
        ckpt = write_random_checkpoint(Path(tmp) / preset, preset=preset, seed=0)
        base = dict(dtype=args.dtype, kv_budget_tokens=max(4096, (prompt + 64) * args.batch), enable_prefix_cache=False)
        torch.set_num_threads(2)
        one = Engine(ckpt, EngineConfig(**base))
        r1 = measure(one, prompt, args.batch, new, reps)
        one.shutdown()
        torch.set_num_threads(1)
        parallel = {"tensor_parallel_size": 2, "threads_per_rank": 1, "attention_dp": args.dp_attention,
                    "reduce_dtype": args.reduce_dtype}
        if args.dp_attention:
            parallel["dp_extras"] = args.dp_extras
        two = Engine(ckpt, EngineConfig(**base, parallel=parallel))
        try:
            r2 = measure(two, prompt, args.batch, new, reps)
        finally:
            two.shutdown()
    rows = []
    for phase in r1:
        a, b = r1[phase], r2[phase]
        logit_rows = 1 if phase == "prefill" else b["tokens"]
        reduce_fp32 = args.reduce_dtype == "float32"
        if args.dp_attention:  # decode batches spread over both ranks; a batch-1 phase runs on one
            per_rank = -(-b["tokens"] // 2) if phase != "prefill" else b["tokens"]
            glm53 = real_dp_bytes_per_step(per_rank, -(-logit_rows // 2), 2, reduce_fp32, args.dp_extras == "split")
        else:
            glm53 = real_bytes_per_step(b["tokens"], logit_rows, reduce_fp32)
        rows.append({
            "phase": phase, "preset": preset, "dtype": args.dtype, "reduce_dtype": args.reduce_dtype,
            "dp_extras": args.dp_extras if args.dp_attention else None,
            "tp1_s": a["seconds_per_step"], f"{two_name}_s": b["seconds_per_step"],
            f"{two_name}_over_tp1": b["seconds_per_step"] / a["seconds_per_step"],
            "collectives_per_step": b["per_step"]["calls"], "bytes_per_step": b["per_step"]["bytes"],
            "commands_per_step": b["commands_per_step"], "glm53_bytes_per_step": glm53,
        })
    if args.json:
        print(json.dumps(rows, indent=2))
    else:
        two, moved = two_name.upper(), ("all_gather", "reduce_scatter") if args.dp_attention else ("all_reduce",)
        label = "exchange B" if args.dp_attention else "all-reduce B"
        print(f"{'phase':>10} {'TP1 s/step':>11} {two + ' s/step':>11} {two + '/TP1':>8} {label:>13} "
              f"{'gather B':>10} {'colls':>6} {'cmds':>5} {'GLM-5.3 B':>12}")
        for r in rows:
            calls = sum(r["collectives_per_step"].values())
            print(f"{r['phase']:>10} {r['tp1_s']:>11.4f} {r[two_name + '_s']:>11.4f} {r[two_name + '_over_tp1']:>8.2f} "
                  f"{sum(r['bytes_per_step'].get(op, 0) for op in moved):>13,.0f} "
                  f"{r['bytes_per_step'].get('gather', 0):>10,.0f} "
                  f"{calls:>6.1f} {r['commands_per_step']:>5.1f} {r['glm53_bytes_per_step']:>12,}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
