#!/usr/bin/env python3
"""Decode throughput: Horizon's engine vs transformers `generate` on the same random checkpoint.

Both run greedy with the same prompts, batch 1 and batch 16, in one process. Printed per batch
size: end-to-end generated tokens/s of each and their ratio, and the same for decode alone
(a one-token run measures prefill, which is subtracted). Goals: >= 3x at batch 1, >= 10x at 16.

Times are CPU time of this process with one intra-op thread by default (as benchmarks/model_forward.py),
so other work on a shared machine does not distort the ratios; each side keeps its best of
--reps interleaved rounds (interference only ever adds time).

    python benchmarks/engine_throughput.py            # "small" preset, 64-token prompts, 64 new tokens
    python benchmarks/engine_throughput.py --quick    # tiny preset, a few tokens (CI)
    python benchmarks/engine_throughput.py --decode-graphs    # the engine with EngineConfig(decode_graphs=True)
                                                              # (torch.compile on a CPU, built at start-up)
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
from inference.forward_batch import ForwardBatch  # noqa: E402
from inference.random_checkpoint import write_random_checkpoint  # noqa: E402

from benchmarks.matmul_floor import record_matmuls, replay_seconds  # noqa: E402


def load_hf(path: Path):
    from transformers import GlmMoeDsaForCausalLM
    from transformers.utils import logging

    logging.set_verbosity_error()
    return GlmMoeDsaForCausalLM.from_pretrained(path, dtype=torch.float32).eval()


def prompts(batch: int, length: int, vocab: int) -> list[list[int]]:
    g = torch.Generator().manual_seed(batch)
    return torch.randint(3, vocab - 1, (batch, length), generator=g).tolist()


def time_hf(model, batch_prompts: list[list[int]], new_tokens: int) -> float:
    ids = torch.tensor(batch_prompts)
    start = time.process_time()
    with torch.inference_mode():
        out = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=new_tokens,
                             min_new_tokens=new_tokens, do_sample=False, eos_token_id=None, pad_token_id=0)
    elapsed = time.process_time() - start
    assert out.shape[1] == ids.shape[1] + new_tokens
    return elapsed


def time_engine(engine: Engine, batch_prompts: list[list[int]], new_tokens: int) -> float:
    params = SamplingParams(temperature=0.0, max_tokens=new_tokens, ignore_eos=True)
    start = time.process_time()
    results = engine.generate([GenerateRequest(prompt_ids=p, params=params) for p in batch_prompts])
    elapsed = time.process_time() - start
    assert all(len(r.token_ids) == new_tokens for r in results)
    return elapsed


def matmul_floors(model, hf, batch_prompts: list[list[int]]) -> tuple[float, float]:
    """Seconds of one batched decode step's matmuls alone (benchmarks/matmul_floor.py): ours, transformers'."""
    page = 16
    per_seq = (len(batch_prompts[0]) + page) // page + 1
    cache = model.new_cache(num_pages=per_seq * len(batch_prompts), page_size=page)
    tables = [list(range(i * per_seq, (i + 1) * per_seq)) for i in range(len(batch_prompts))]
    n = len(batch_prompts)
    first = model.forward_batch(ForwardBatch.build(batch_prompts, [0] * n, tables), cache).logits.argmax(-1).tolist()
    step = ForwardBatch.build([[t] for t in first], [len(p) for p in batch_prompts], tables)
    ours = record_matmuls(lambda: model.forward_batch(step, cache))
    with torch.inference_mode():
        ids = torch.tensor(batch_prompts)
        out = hf(ids, use_cache=True, logits_to_keep=1)
        nxt = out.logits[:, -1].argmax(-1, keepdim=True)
        mask = torch.ones(n, ids.shape[1] + 1, dtype=torch.long)
        theirs = record_matmuls(lambda: hf(nxt, attention_mask=mask, cache=out.cache, use_cache=True))
    return replay_seconds(ours), replay_seconds(theirs)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--preset", default="small")
    p.add_argument("--prompt-len", type=int, default=64)
    p.add_argument("--new-tokens", type=int, default=64)
    p.add_argument("--batches", default="1,16")
    p.add_argument("--threads", type=int, default=1, help="torch intra-op threads for both (0: torch default)")
    p.add_argument("--reps", type=int, default=2, help="interleaved rounds; each time keeps its best")
    p.add_argument("--kv-cache-dtype", default="auto", choices=["auto", "fp8"], help="the engine's KV cache format")
    p.add_argument("--decode-graphs", "--compile-decode", dest="decode_graphs", action="store_true",
                   help="EngineConfig(decode_graphs=True) (--compile-decode: its earlier name)")
    p.add_argument("--quick", action="store_true", help="tiny preset, short generations (CI)")
    a = p.parse_args(argv)
    if a.threads:
        torch.set_num_threads(a.threads)
    if a.quick:
        a.preset, a.prompt_len, a.new_tokens, a.reps = "tiny", 16, 4, 1
    batches = [int(b) for b in a.batches.split(",")]
    with tempfile.TemporaryDirectory() as tmp:
        path = write_random_checkpoint(Path(tmp) / "ckpt", preset=a.preset, seed=0)
        hf = load_hf(path)
        kv = max(batches) * (a.prompt_len + a.new_tokens) * 2
        engine = Engine(path, EngineConfig(dtype="float32", kv_budget_tokens=kv, page_size=64,
                                           max_batch_tokens=4096, chunk_size=4096, enable_prefix_cache=False,
                                           kv_cache_dtype=a.kv_cache_dtype, decode_graphs=a.decode_graphs or None))
        vocab = engine.model_config.vocab_size
        # Warm both (lazy imports, allocator first touches) on throw-away batches.
        time_engine(engine, prompts(1, a.prompt_len, vocab), 3)
        time_engine(engine, prompts(2, a.prompt_len, vocab), 2)
        time_hf(hf, prompts(2, a.prompt_len, vocab), 2)
        for b in batches:
            batch_prompts = prompts(b, a.prompt_len, vocab)
            # Prefill alone (one new token), then the full run: decode = the difference.
            best = [float("inf")] * 4
            for _ in range(max(1, a.reps)):
                run = (time_hf(hf, batch_prompts, 1), time_hf(hf, batch_prompts, a.new_tokens),
                       time_engine(engine, batch_prompts, 1), time_engine(engine, batch_prompts, a.new_tokens))
                best = [min(x, y) for x, y in zip(best, run)]
            hf_prefill, hf_total, our_prefill, our_total = best
            tokens = b * a.new_tokens
            decode_tokens = b * (a.new_tokens - 1)
            hf_decode, our_decode = max(1e-9, hf_total - hf_prefill), max(1e-9, our_total - our_prefill)
            our_floor, hf_floor = matmul_floors(engine.model, hf, batch_prompts)
            hf_step = hf_decode / max(1, a.new_tokens - 1)
            print(json.dumps({
                "batch": b, "preset": a.preset, "prompt_len": a.prompt_len, "new_tokens": a.new_tokens,
                "engine_tok_s": round(tokens / our_total, 2), "transformers_tok_s": round(tokens / hf_total, 2),
                "ratio": round(hf_total / our_total, 2),
                "engine_decode_tok_s": round(decode_tokens / our_decode, 2),
                "transformers_decode_tok_s": round(decode_tokens / hf_decode, 2),
                "decode_ratio": round(hf_decode / our_decode, 2),
                "goal": 3.0 if b == 1 else 10.0,
                # One decode step's matmuls alone, and the decode ratio they cap (every other op at zero).
                "matmul_floor_ms_per_step": {"engine": round(1e3 * our_floor, 3), "transformers": round(1e3 * hf_floor, 3)},
                "ceiling_decode_ratio": round(hf_step / our_floor, 2),
                "kv_cache_dtype": a.kv_cache_dtype, "kv_bytes_per_token": engine.cache_bytes_per_token,
                "decode_graphs": a.decode_graphs,
            }), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
