"""GLM-5.3-Flash (`glm5_next`): our prefill and decode vs transformers on the same checkpoint, and
KDA chunked prefill vs the naive per-token recurrence, as ratios measured in one run.

Both sides run one random checkpoint (inference.glm5_next.random_checkpoint, the release layout)
in fp32 on CPU at batch 1 with one intra-op thread; times are this process's CPU time
(time.process_time), so other load on a shared machine does not skew the ratios. Decode: ours is
one `forward(token, state)` step (recurrent KDA step + cached DSA latents); transformers' is one
bare forward step with its DynamicCache. Each metric keeps the best of `reps` interleaved rounds.
Ratios > 1 mean ours is faster.

    python benchmarks/model_forward.py --model flash-tiny   # or flash-small; --quick: short prompt
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

from inference.glm5_next.loader import load_flash_model  # noqa: E402
from inference.glm5_next.random_checkpoint import write_flash_checkpoint  # noqa: E402


def _cpu(fn) -> float:
    t = time.process_time()
    fn()
    return time.process_time() - t


def run(preset: str, prompt_len: int, steps: int, reps: int, tmp: Path) -> dict:
    from transformers import DynamicCache, Glm5NextForConditionalGeneration

    path = write_flash_checkpoint(tmp / preset, preset, seed=0, dtype=torch.float32)
    ours = load_flash_model(path)
    hf = Glm5NextForConditionalGeneration.from_pretrained(path, dtype=torch.float32, attn_implementation="eager").eval()
    ids = torch.randint(3, ours.config.vocab_size, (1, prompt_len), generator=torch.Generator().manual_seed(0))
    best: dict[str, float] = {}

    def keep(name: str, seconds: float) -> None:
        best[name] = min(best.get(name, float("inf")), seconds)

    for _ in range(reps):
        keep("ours_prefill", _cpu(lambda: ours(ids)))
        ours.set_kda_prefill_form("recurrent")
        keep("ours_prefill_recurrent", _cpu(lambda: ours(ids)))
        ours.set_kda_prefill_form("chunked")
        with torch.no_grad():
            keep("hf_prefill", _cpu(lambda: hf(ids)))
        state = ours.new_state(1)
        token = ours(ids, state)[:, -1:].argmax(-1)

        def ours_decode():
            nonlocal token
            for _ in range(steps):
                token = ours(token, state)[:, -1:].argmax(-1)

        keep("ours_decode", _cpu(ours_decode) / steps)
        with torch.no_grad():
            cache = DynamicCache(config=hf.config.text_config)
            out = hf(ids, cache=cache, use_cache=True)
            hf_token = out.logits[:, -1:].argmax(-1)

            def hf_decode():
                nonlocal hf_token
                for _ in range(steps):
                    hf_token = hf(hf_token, cache=cache, use_cache=True).logits[:, -1:].argmax(-1)

            keep("hf_decode", _cpu(hf_decode) / steps)
    with torch.no_grad():
        diff = (ours(ids) - hf(ids).logits).abs().max().item()
    return {
        "preset": preset, "prompt_len": prompt_len, "decode_steps": steps, "max_abs_logit_diff": diff,
        "ours_prefill_tok_s": prompt_len / best["ours_prefill"], "hf_prefill_tok_s": prompt_len / best["hf_prefill"],
        "ours_decode_tok_s": 1 / best["ours_decode"], "hf_decode_tok_s": 1 / best["hf_decode"],
        "prefill_ratio": best["hf_prefill"] / best["ours_prefill"],
        "decode_ratio": best["hf_decode"] / best["ours_decode"],
        "kda_chunked_vs_recurrent_prefill_ratio": best["ours_prefill_recurrent"] / best["ours_prefill"],
    }  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", choices=["flash-tiny", "flash-small"], default="flash-tiny")
    parser.add_argument("--quick", action="store_true", help="short prompt, few steps, one round")
    parser.add_argument("--json", type=Path, help="also write the results to this file")
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    plan = [(48, 4, 1)] if args.quick else [(256, 16, 3), (1024, 16, 2)]
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        for prompt_len, steps, reps in plan:
            r = run(args.model, prompt_len, steps, reps, Path(tmp))
            results.append(r)
            print(f"[{args.model}] prompt {prompt_len}, decode {steps} steps, batch 1, fp32 CPU "
                  f"(max |logit diff| vs transformers {r['max_abs_logit_diff']:.2e})")
            print(f"  prefill  ours {r['ours_prefill_tok_s']:9.1f} tok/s  transformers {r['hf_prefill_tok_s']:9.1f} tok/s"
                  f"  ratio {r['prefill_ratio']:.2f}x")
            print(f"  decode   ours {r['ours_decode_tok_s']:9.1f} tok/s  transformers {r['hf_decode_tok_s']:9.1f} tok/s"
                  f"  ratio {r['decode_ratio']:.2f}x")
            print(f"  KDA prefill: chunked vs per-token recurrent {r['kda_chunked_vs_recurrent_prefill_ratio']:.2f}x")
            sys.stdout.flush()
    if args.json:
        args.json.write_text(json.dumps(results, indent=2) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
