#!/usr/bin/env python3
"""Overlap scheduling on vs off: decode tokens/s and where each step's time goes, in one run.

Two engines on one random checkpoint (fp32), the same greedy batch through each, interleaved
rounds, best of --reps (wall clock: the overlap's point is wall time; on a CPU its forward runs on
a worker thread). Printed per batch size, as JSON:

- decode tokens/s of each and their ratio (overlap / serial; decode = a full run minus a
  one-token run, which is prefill);
- per decode step: wall ms; forward ms (the runner's target forward: wall time where it runs on a
  CPU, CUDA-event time on a GPU); exposed host ms = wall - forward (the time the forward is not
  running: scheduling, sampling and stop checks on the host, emitting, not hidden behind it);
  engine-thread ms (the engine thread's time in the step not spent waiting for a forward); and
  exposed / forward.

    python benchmarks/overlap_schedule.py             # small preset, batches 1 and 16, 64 new tokens
    python benchmarks/overlap_schedule.py --quick     # tiny preset, a few tokens (CI)
    python benchmarks/overlap_schedule.py --stop      # every request carries a stop string (never met):
                                                      # each step detokenizes each row's tail, as a server does
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
from inference.engine.runner_commands import TargetStep  # noqa: E402
from inference.random_checkpoint import write_random_checkpoint  # noqa: E402


class StepClock:
    """Wall time of the engine's steps and the time of its target forwards (wrapped instance methods)."""

    def __init__(self, engine: Engine):
        self.engine = engine
        self.step_s = self.forward_s = 0.0
        self.steps = 0
        self.cuda = engine.kv_cache.device.type == "cuda"
        self._events: list = []  # CUDA: (start, end) event pairs around each forward, read at snapshot
        step, execute = engine.step, engine.runner.execute

        def timed_step():
            start = time.perf_counter()
            step()
            self.step_s += time.perf_counter() - start
            self.steps += 1

        def timed_execute(cmd):
            if not isinstance(cmd, TargetStep):
                return execute(cmd)
            if self.cuda:
                pair = (torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
                pair[0].record()
                out = execute(cmd)
                pair[1].record()
                self._events.append(pair)
                return out
            start = time.perf_counter()
            out = execute(cmd)
            self.forward_s += time.perf_counter() - start
            return out

        engine.step, engine.runner.execute = timed_step, timed_execute

    def snapshot(self) -> tuple[float, float, float, int]:
        if self._events:
            torch.cuda.synchronize()
            self.forward_s += sum(a.elapsed_time(b) for a, b in self._events) / 1e3
            self._events.clear()
        wait = self.engine.overlap.wait_s if self.engine.overlap is not None else None
        return self.step_s, self.forward_s, wait, self.steps


def run(engine: Engine, prompts: list[list[int]], new_tokens: int, stop: list[str] = ()) -> tuple[float, list[list[int]]]:
    params = SamplingParams(temperature=0.0, max_tokens=new_tokens, ignore_eos=True, stop=list(stop))
    start = time.perf_counter()
    results = engine.generate([GenerateRequest(prompt_ids=p, params=params) for p in prompts])
    elapsed = time.perf_counter() - start
    assert all(len(r.token_ids) == new_tokens for r in results)
    return elapsed, [r.token_ids for r in results]


def prompts(batch: int, length: int, vocab: int) -> list[list[int]]:
    g = torch.Generator().manual_seed(batch)
    return torch.randint(3, vocab - 1, (batch, length), generator=g).tolist()


def measure(engine: Engine, clock: StepClock, batch_prompts, new_tokens: int, stop: list[str]) -> dict:
    """One round: prefill-only run, then the full run with its per-step times."""
    prefill, _ = run(engine, batch_prompts, 1, stop)
    before = clock.snapshot()
    total, tokens = run(engine, batch_prompts, new_tokens, stop)
    after = clock.snapshot()
    step_s, forward_s, steps = after[0] - before[0], after[1] - before[1], after[3] - before[3]
    # Serial on a CPU the engine thread runs the forward itself; on CUDA it waits in the token read.
    waited = (after[2] - before[2]) if after[2] is not None else (0.0 if clock.cuda else forward_s)
    return {"prefill": prefill, "total": total, "tokens": tokens, "step_s": step_s, "forward_s": forward_s,
            "engine_thread_s": step_s - waited, "steps": steps}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--preset", default="small")
    p.add_argument("--prompt-len", type=int, default=32)
    p.add_argument("--new-tokens", type=int, default=64)
    p.add_argument("--batches", default="1,16")
    p.add_argument("--device", default="cpu")
    p.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"])
    p.add_argument("--threads", type=int, default=1, help="torch intra-op threads (0: torch default)")
    p.add_argument("--reps", type=int, default=3, help="interleaved rounds; each side keeps its best")
    p.add_argument("--stop", action="store_true", help="requests carry a stop string that never matches "
                   "(the engine detokenizes every row's tail each step, with the checkpoint's tokenizer)")
    p.add_argument("--quick", action="store_true", help="tiny preset, short generations (CI)")
    a = p.parse_args(argv)
    if a.threads:
        torch.set_num_threads(a.threads)
    if a.quick:
        a.preset, a.prompt_len, a.new_tokens, a.reps, a.batches = "tiny", 8, 6, 1, "4"
    batches = [int(b) for b in a.batches.split(",")]
    with tempfile.TemporaryDirectory() as tmp:
        path = write_random_checkpoint(Path(tmp) / "ckpt", preset=a.preset, seed=0)
        kv = max(batches) * (a.prompt_len + a.new_tokens) * 2
        detokenize, stop = None, []
        if a.stop:
            from inference.tokenizer import Tokenizer

            detokenize, stop = Tokenizer.from_pretrained(path).decode, ["\x00never"]
        engines, clocks = {}, {}
        for overlap in (False, True):
            engines[overlap] = Engine(path, EngineConfig(
                dtype=a.dtype, device=a.device, kv_budget_tokens=kv, page_size=64, max_batch_tokens=4096, chunk_size=4096,
                enable_prefix_cache=False, overlap_schedule=overlap), detokenize=detokenize)  # fmt: skip
            clocks[overlap] = StepClock(engines[overlap])
        vocab = engines[False].model_config.vocab_size
        for eng in engines.values():  # warm: lazy imports, allocator first touches, the worker thread
            run(eng, prompts(2, a.prompt_len, vocab), 3)
        for b in batches:
            batch_prompts = prompts(b, a.prompt_len, vocab)
            best: dict[bool, dict] = {}
            for _ in range(max(1, a.reps)):
                for overlap in (False, True):
                    r = measure(engines[overlap], clocks[overlap], batch_prompts, a.new_tokens, stop)
                    if overlap not in best or r["total"] - r["prefill"] < best[overlap]["total"] - best[overlap]["prefill"]:
                        best[overlap] = r
            serial, over = best[False], best[True]
            assert serial["tokens"] == over["tokens"], "overlap changed the greedy tokens"
            decode_tokens = b * (a.new_tokens - 1)
            rate = {k: decode_tokens / max(1e-9, r["total"] - r["prefill"]) for k, r in best.items()}
            per_step = {name: {"step_ms": round(1e3 * r["step_s"] / r["steps"], 3),
                               "forward_ms": round(1e3 * r["forward_s"] / r["steps"], 3),
                               "exposed_host_ms": round(1e3 * max(0.0, r["step_s"] - r["forward_s"]) / r["steps"], 3),
                               "engine_thread_ms": round(1e3 * r["engine_thread_s"] / r["steps"], 3),
                               "exposed_over_forward": round(max(0.0, r["step_s"] - r["forward_s"])
                                                             / max(1e-9, r["forward_s"]), 3)}
                        for name, r in (("serial", serial), ("overlap", over))}  # fmt: skip
            print(json.dumps({
                "batch": b, "preset": a.preset, "prompt_len": a.prompt_len, "new_tokens": a.new_tokens,
                "threads": torch.get_num_threads(), "stop_strings": a.stop, "device": a.device,
                "serial_decode_tok_s": round(rate[False], 2), "overlap_decode_tok_s": round(rate[True], 2),
                "decode_ratio": round(rate[True] / rate[False], 3),
                "step_ms_ratio": round(per_step["serial"]["step_ms"] / max(1e-9, per_step["overlap"]["step_ms"]), 3),
                "per_step": per_step,
                "overlapped_steps": engines[True].overlap.steps["chained"],
            }), flush=True)
        for eng in engines.values():
            eng.shutdown()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
