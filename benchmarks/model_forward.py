"""Prefill and single-token decode throughput: our paged model vs transformers, same checkpoint.

Both sides run the same random GLM-5.x checkpoint (written by inference.random_checkpoint) in fp32
on CPU at batch 1, one intra-op thread. Times are CPU time of this process (time.process_time), so
other work on a shared machine does not distort the ratios; on an idle machine they equal wall time. Decode is measured after a prefill: ours through the paged KV cache (the
engine's hot path, including building each step's ForwardBatch), transformers through
`generate` (per-token time = gap between consecutive logits-processor calls, i.e. one whole
generate step) and through a bare `forward` step with its DynamicCache. Both sides are measured in
interleaved rounds and each metric keeps its best round. Ratios > 1 mean we are faster.

Our decode is measured twice, both through the engine's decode path (inference/engine/
decode_graphs.py: the step staged into fixed buffers, no host sync): eager, and as a decode graph
(torch.compile on a CPU, what `EngineConfig(decode_graphs=True)` and `horizon serve --cuda-graphs`
run; a compiled step serves at least 2 sequences, so batch 1 runs padded to 2). The compile
itself is timed separately, in wall-clock time (inductor compiles in worker processes), and is
not part of the per-token numbers.

    python benchmarks/model_forward.py            # tiny and small presets
    python benchmarks/model_forward.py --quick    # tiny only, short prompt (used by a test)
    python benchmarks/model_forward.py --model flash-tiny   # GLM-5.3-Flash: benchmarks/flash_forward.py
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

# Repository root first: this directory has a kernels.py that would shadow the `kernels` package.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from inference.engine.decode_graphs import DecodeGraphs, GraphSettings  # noqa: E402
from inference.forward_batch import ForwardBatch  # noqa: E402
from inference.loader import load_model  # noqa: E402
from inference.random_checkpoint import write_random_checkpoint  # noqa: E402

from benchmarks.matmul_floor import record_matmuls, replay_seconds  # noqa: E402

PAGE = 16


def _seconds(fn) -> float:
    t = time.process_time()
    fn()
    return time.process_time() - t


def decode_runner(model, prompt_len: int, decode_steps: int, mode: str) -> DecodeGraphs:
    """The engine's decode path over a cache for one sequence (its last page: the padding rows')."""
    pages = (prompt_len + decode_steps + PAGE) // PAGE + 1
    cache = model.new_cache(num_pages=pages + 1, page_size=PAGE)
    settings = GraphSettings.build(model.config, mode, 1, pages * PAGE, PAGE, pad_page=pages)
    return DecodeGraphs(model, cache, settings)


def ours_measurements(runner: DecodeGraphs, prompt: list[int], decode_steps: int) -> dict:
    model, cache = runner.model, runner.cache
    pages = list(range(cache.num_pages - 1))

    def prefill():
        return model.forward_batch(ForwardBatch.build([prompt], [0], [pages]), cache)

    def decode_step() -> float:
        token = int(prefill().logits[0].argmax())
        times = []
        for i in range(decode_steps):
            t = time.process_time()
            token = int(runner.target([[token]], [len(prompt) + i], [pages], 1, False).logits[0].argmax())
            times.append(time.process_time() - t)
        return statistics.median(times)

    return {"prefill": lambda: _seconds(prefill), "decode": decode_step}


def hf_measurements(model, prompt: list[int], decode_steps: int) -> dict:
    from transformers import LogitsProcessor, LogitsProcessorList

    ids = torch.tensor([prompt])

    class StepClock(LogitsProcessor):
        """Called once per generated token: the gaps between calls are whole generate steps."""

        def __init__(self):
            self.times: list[float] = []

        def __call__(self, input_ids, scores):
            self.times.append(time.process_time())
            return scores

    def prefill():
        with torch.no_grad():
            model(ids, use_cache=True, logits_to_keep=1)

    def generate_step() -> float:
        clock = StepClock()
        with torch.no_grad():
            model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=decode_steps + 1,
                           min_new_tokens=decode_steps + 1, do_sample=False, pad_token_id=0, eos_token_id=None,
                           logits_processor=LogitsProcessorList([clock]))  # fmt: skip
        return statistics.median(b - a for a, b in zip(clock.times, clock.times[1:]))

    def forward_step() -> float:
        with torch.no_grad():
            out = model(ids, use_cache=True, logits_to_keep=1)
            cache, token = out.cache, out.logits[:, -1].argmax(-1, keepdim=True)
            times = []
            for _ in range(decode_steps):
                t = time.process_time()
                out = model(token, cache=cache, use_cache=True)
                cache, token = out.cache, out.logits[:, -1].argmax(-1, keepdim=True)
                times.append(time.process_time() - t)
            return statistics.median(times)

    return {"prefill": lambda: _seconds(prefill), "generate_step": generate_step, "forward_step": forward_step}


def compile_seconds(runner: DecodeGraphs) -> float:
    """Wall time of building the decode graph (what an engine does at start-up)."""
    start = time.perf_counter()
    runner.prepare()
    return time.perf_counter() - start


def matmul_floors(ours, hf, prompt: list[int]) -> dict[str, float]:
    """Seconds per decode token of each side's matmuls alone (benchmarks/matmul_floor.py), one step
    after a prefill of `prompt`, and the weight bytes our step streams."""
    pages = list(range((len(prompt) + PAGE) // PAGE + 1))
    cache = ours.new_cache(num_pages=len(pages), page_size=PAGE)
    token = int(ours.forward_batch(ForwardBatch.build([prompt], [0], [pages]), cache).logits[0].argmax())
    step = ForwardBatch.build([[token]], [len(prompt)], [pages])
    our_trace = record_matmuls(lambda: ours.forward_batch(step, cache))
    with torch.no_grad():
        out = hf(torch.tensor([prompt]), use_cache=True, logits_to_keep=1)
        hf_trace = record_matmuls(lambda: hf(out.logits[:, -1].argmax(-1, keepdim=True), cache=out.cache, use_cache=True))
    return {"ours": replay_seconds(our_trace), "transformers": replay_seconds(hf_trace),
            "our_weight_bytes": our_trace.weight_bytes(ours)}  # fmt: skip


def measure(ours: dict, hf: dict, reps: int) -> dict[str, float]:
    """Interleave both sides round by round and keep each metric's best round: interference from
    other work only ever adds time, so the minimum is the least disturbed estimate."""
    both = {f"ours_{k}": f for k, f in ours.items()} | {f"hf_{k}": f for k, f in hf.items()}
    best = {k: float("inf") for k in both}
    for _ in range(reps + 1):  # the first round doubles as warm-up
        for k, f in both.items():
            best[k] = min(best[k], f())
    return best


def agreement(ours, hf, prompt: list[int]) -> tuple[float, float]:
    """(max |logit diff|, share of positions within 1e-4). On long prompts a few positions can
    differ: two indexer scores a few ulp apart (a near-tie) may rank differently under a different
    summation order, and the top-k then picks another key; that is expected, not an error."""
    with torch.no_grad():
        ref = hf(torch.tensor([prompt])).logits[0]
    diff = (ours(torch.tensor([prompt]))[0] - ref).abs().amax(-1)
    return diff.max().item(), (diff <= 1e-4).float().mean().item()


def run(preset: str, prompt_len: int, decode_steps: int, reps: int, workdir: Path) -> dict:
    from transformers import GlmMoeDsaForCausalLM
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()  # the MTP layer is an expected "unexpected key" for transformers
    path = write_random_checkpoint(workdir / preset, preset=preset, seed=0)
    ours = load_model(path, dtype=torch.float32, latent_norm_eps=1e-6)  # transformers' q_a/kv_a eps
    hf = GlmMoeDsaForCausalLM.from_pretrained(path, dtype=torch.float32, attn_implementation="sdpa").eval()
    compiled = decode_runner(ours, prompt_len, decode_steps, "compile")
    prompt = torch.randint(0, ours.config.vocab_size, (prompt_len,), generator=torch.Generator().manual_seed(0)).tolist()
    max_diff, within = agreement(ours, hf, prompt)
    compile_s = compile_seconds(compiled)
    steps_before = compiled.compilers["target"].calls
    ours_both = ours_measurements(decode_runner(ours, prompt_len, decode_steps, "eager"), prompt, decode_steps)
    ours_both["compiled_decode"] = ours_measurements(compiled, prompt, decode_steps)["decode"]
    t = measure(ours_both, hf_measurements(hf, prompt, decode_steps), reps)
    if compiled.compilers["target"].calls == steps_before or compiled.compilers["target"].failure:
        raise RuntimeError(f"the decode graph did not run ({compiled.compilers['target'].failure})")
    floor = matmul_floors(ours, hf, prompt)
    result = {
        "preset": preset,
        "prompt_len": prompt_len,
        "decode_steps": decode_steps,
        "max_abs_logit_diff": max_diff,
        "positions_within_1e-4": within,
        "ours": {
            "prefill_tok_s": prompt_len / t["ours_prefill"],
            "decode_tok_s": 1 / t["ours_decode"],
            "compiled_decode_tok_s": 1 / t["ours_compiled_decode"],
            "compile_s": compile_s,
        },
        "transformers": {
            "prefill_tok_s": prompt_len / t["hf_prefill"],
            "generate_tok_s": 1 / t["hf_generate_step"],
            "forward_step_tok_s": 1 / t["hf_forward_step"],
        },
    }
    o, h = result["ours"], result["transformers"]
    result["prefill_ratio"] = o["prefill_tok_s"] / h["prefill_tok_s"]
    result["decode_ratio_vs_generate"] = o["decode_tok_s"] / h["generate_tok_s"]
    result["decode_ratio_vs_forward_step"] = o["decode_tok_s"] / h["forward_step_tok_s"]
    result["compiled_decode_ratio_vs_generate"] = o["compiled_decode_tok_s"] / h["generate_tok_s"]
    # The best decode ratio reachable with these matmul kernels: transformers' step over our
    # matmuls alone (everything else in our step taken to zero).
    result["matmul_floor"] = {
        "ours_ms_per_token": 1e3 * floor["ours"],
        "transformers_ms_per_token": 1e3 * floor["transformers"],
        "our_weight_mb_per_token": floor["our_weight_bytes"] / 1e6,
        "ceiling_decode_ratio_vs_generate": t["hf_generate_step"] / floor["ours"],
    }
    return result


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if any(a.startswith("--model") for a in argv):  # GLM-5.3-Flash is its own model family and benchmark
        from benchmarks.flash_forward import main as flash_main

        return flash_main(argv)
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="tiny preset, short prompt, few repetitions")
    parser.add_argument("--json", type=Path, help="also write the results to this file")
    parser.add_argument("--threads", type=int, default=1, help="torch intra-op threads (default 1)")
    args = parser.parse_args(argv)
    # One thread: CPU time then measures work, not how busy the machine's other cores are.
    torch.set_num_threads(args.threads)
    plan = [("tiny", 48, 6, 2)] if args.quick else [("tiny", 512, 32, 5), ("small", 512, 32, 3), ("small", 2048, 16, 2)]
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        for preset, prompt_len, steps, reps in plan:
            r = run(preset, prompt_len, steps, reps, Path(tmp))
            results.append(r)
            o, h = r["ours"], r["transformers"]
            print(f"[{preset}] prompt {prompt_len}, decode {steps} steps, batch 1, fp32 CPU "
                  f"(vs transformers: max |logit diff| {r['max_abs_logit_diff']:.2e}, "
                  f"{100 * r['positions_within_1e-4']:.1f}% of positions within 1e-4)")  # fmt: skip
            print(f"  prefill  ours {o['prefill_tok_s']:10.1f} tok/s   transformers {h['prefill_tok_s']:10.1f} tok/s"
                  f"   ratio {r['prefill_ratio']:.2f}x")  # fmt: skip
            print(f"  decode   ours {o['decode_tok_s']:10.1f} tok/s   transformers generate {h['generate_tok_s']:8.1f} tok/s"
                  f"   ratio {r['decode_ratio_vs_generate']:.2f}x")  # fmt: skip
            print(f"           (transformers bare forward step {h['forward_step_tok_s']:.1f} tok/s, "
                  f"ratio {r['decode_ratio_vs_forward_step']:.2f}x)")  # fmt: skip
            print(f"  decode   ours compiled {o['compiled_decode_tok_s']:10.1f} tok/s   vs transformers generate"
                  f"   ratio {r['compiled_decode_ratio_vs_generate']:.2f}x   (compile {o['compile_s']:.1f} s wall, once)")  # fmt: skip
            f = r["matmul_floor"]
            print(f"  matmul floor per token: ours {f['ours_ms_per_token']:.2f} ms "
                  f"({f['our_weight_mb_per_token']:.1f} MB of weights), transformers {f['transformers_ms_per_token']:.2f} ms"
                  f"; ceiling for the decode ratio {f['ceiling_decode_ratio_vs_generate']:.2f}x")  # fmt: skip
            sys.stdout.flush()
    if args.json:
        args.json.write_text(json.dumps(results, indent=2) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
