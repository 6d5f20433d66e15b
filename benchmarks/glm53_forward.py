"""A full-width GLM-5.3 forward on one GPU: 2 layers (1 dense + 1 MoE), no MTP, random FP8 weights.

    python benchmarks/glm53_forward.py [--dry-run] [--json PATH] [--formats dequant,fp8,fp8_w8a8]

The config is random_checkpoint's "glm53-2layer" preset: GLM-5.3's widths (hidden 6144, 64 heads,
256 experts, indexer 32 x 128 with top-2048, vocab 154,880, IndexShare freq 4 / offset 3) with
num_hidden_layers=2, first_k_dense_replace=1 and no MTP layer. Weights are generated on the device
in the FP8 release's format (e4m3 + 128x128 block scales for the quantized projections and the
experts, bf16/fp32 for the rest), never written to disk. Then, per weight format:
  dequant   a bf16 copy of every FP8 weight (dequantize-at-load), the reference
  fp8       the FP8-resident model, per-call dequantization (W8A16)
  fp8_w8a8  the same model, act_quant + block-scaled FP8 GEMM / FP8 fused MoE
it measures the weights' bytes, torch.cuda.max_memory_allocated, prefill of 2048 tokens, and
decode steps at B in {1, 8, 64} over 4096 cached tokens (random cache rows, bf16 KV), and compares
logits with the dequant model (fp8: expected equal up to GEMM-shape effects; w8a8: reported).

--dry-run runs the same code on the CPU at a tiny width (seconds), so a typo never costs GPU time.
benchmarks/gpu_decode.py builds its model, fills its cache and times its steps with the helpers here.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from inference.config import ModelConfig  # noqa: E402
from inference.forward_batch import ForwardBatch  # noqa: E402
from inference.fp8 import dequantize_blockwise, quantize_blockwise  # noqa: E402
from inference.fp8_resident import make_fp8_resident, set_fp8_mode  # noqa: E402
from inference.loader import _FP32  # noqa: E402  (the loader's fp32-kept parameters)
from inference.model import Glm5ForCausalLM  # noqa: E402
from inference.random_checkpoint import _QUANTIZED, preset_config  # noqa: E402

E4M3 = torch.float8_e4m3fn
FP8 = {"quantization_config": {"quant_method": "fp8", "weight_block_size": [128, 128]}}
# Random cache rows are written this many slots at a time (bounds the fp32 temporaries at 64K contexts).
FILL_CHUNK = 1 << 18
DRY = dict(vocab_size=1024, hidden_size=256, intermediate_size=512, moe_intermediate_size=128, num_attention_heads=4,
           q_lora_rank=128, kv_lora_rank=128, qk_nope_head_dim=32, qk_rope_head_dim=32, v_head_dim=32,
           n_routed_experts=16, num_experts_per_tok=4, index_n_heads=4, index_head_dim=64, index_topk=64,
           max_position_embeddings=8192)  # fmt: skip
SIZES = {"gpu": dict(prefill=2048, cached=4096, batches=(1, 8, 64), page=64, reps=5, check_len=256),
         "dry": dict(prefill=32, cached=64, batches=(1, 4), page=16, reps=1, check_len=16)}  # fmt: skip


def glm53_config(dry_run: bool) -> ModelConfig:
    raw = {**preset_config("glm53-2layer", DRY if dry_run else None), **FP8}
    raw.setdefault("num_key_value_heads", raw["num_attention_heads"])
    return ModelConfig.from_dict(raw)


def random_fp8_model(config: ModelConfig, device: torch.device, seed: int = 0) -> Glm5ForCausalLM:
    """The FP8-resident model (mode "fp8"), every weight drawn on `device` in the release's format."""
    block = config.weight_block_size
    with torch.device("meta"):
        model = Glm5ForCausalLM(config)
        make_fp8_resident(model, config, block, "fp8", lambda name: bool(_QUANTIZED.search(name)))
    gen = torch.Generator(device=device).manual_seed(seed)
    state = {}
    meta = model.state_dict()
    for name, p in meta.items():
        shape = tuple(p.shape)
        if name.endswith("_scale_inv"):
            continue
        if p.dtype == E4M3:  # per leading index: a whole expert stack in fp32 would not fit
            q = torch.empty(shape, dtype=E4M3, device=device)
            s = torch.empty(tuple(meta[name + "_scale_inv"].shape), device=device)
            for i in range(shape[0] if len(shape) == 3 else 1):
                w = torch.randn(shape[-2:], device=device, generator=gen) / shape[-1] ** 0.5
                qi, si = quantize_blockwise(w, block)
                if len(shape) == 3:
                    q[i], s[i] = qi, si
                else:
                    q, s = qi, si
            state[name], state[name + "_scale_inv"] = q, s
            continue
        dtype = torch.float32 if _FP32.search(name) else torch.bfloat16
        if name.endswith("e_score_correction_bias"):
            t = torch.randn(shape, device=device, generator=gen) * 0.1
        elif name.endswith("embed_tokens.weight"):
            t = torch.randn(shape, device=device, generator=gen)
        elif len(shape) == 1:
            t = (0.0 if name.endswith(".bias") else 1.0) + 0.1 * torch.randn(shape, device=device, generator=gen)
        else:
            t = torch.randn(shape, device=device, generator=gen) / shape[-1] ** 0.5
        state[name] = t.to(dtype)
    model.load_state_dict(state, strict=True, assign=True)
    return model


def dequantized_copy(model: Glm5ForCausalLM) -> Glm5ForCausalLM:
    """What load_model(weight_format="dequant") builds from the same checkpoint: every FP8 weight
    dequantized to bf16 (per expert, to bound the transient), everything else cloned."""
    block = model.config.weight_block_size
    src = model.state_dict()
    state = {}
    for name, t in src.items():
        if name.endswith("_scale_inv"):
            continue
        if t.dtype != E4M3:
            state[name] = t.clone()
            continue
        scale = src[name + "_scale_inv"]
        if t.dim() == 3:
            out = torch.empty(t.shape, dtype=torch.bfloat16, device=t.device)
            for i in range(t.shape[0]):
                out[i] = dequantize_blockwise(t[i], scale[i], block, torch.bfloat16)
            state[name] = out
        else:
            state[name] = dequantize_blockwise(t, scale, block, torch.bfloat16)
    with torch.device("meta"):
        dense = Glm5ForCausalLM(model.config)
    dense.load_state_dict(state, strict=True, assign=True)
    return dense


def _bytes(model) -> int:
    seen = {id(t): t for t in model.state_dict().values()}
    return sum(t.numel() * t.element_size() for t in seen.values())


def sync(device):
    if device.type == "cuda":
        torch.cuda.synchronize()


def timed_ms(fn, device, reps: int) -> float:
    """Median wall ms of fn() over reps calls after one warm-up, the device synchronized each time."""
    fn()
    sync(device)
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        sync(device)
        times.append(time.perf_counter() - t0)
    return 1e3 * statistics.median(times)


def fill_random_cache(model, cache, config, device) -> None:
    """Random rows in every slot of every layer (decode cost does not depend on the values)."""
    total = cache.num_pages * cache.page_size
    for layer in range(cache.num_layers):
        for start in range(0, total, FILL_CHUNK):
            slots = torch.arange(start, min(total, start + FILL_CHUNK), device=device)
            cache.latent_rows(layer).write(slots, torch.randn(slots.numel(), config.latent_dim, device=device).to(model.dtype))
            if layer in cache.indexer:
                keys = torch.randn(slots.numel(), config.index_head_dim, device=device).to(model.dtype)
                cache.indexer_rows(layer).write(slots, keys)


def _peak(device) -> int:
    return torch.cuda.max_memory_allocated() if device.type == "cuda" else 0


def run_format(model, config, device, size) -> dict:
    gen = torch.Generator().manual_seed(1)
    page, cached, batches = size["page"], size["cached"], size["batches"]
    pages_per_seq = cached // page + 1
    num_pages = max(max(batches) * pages_per_seq, size["prefill"] // page + 1) + 1
    cache = model.new_cache(num_pages, page)
    fill_random_cache(model, cache, config, device)
    out = {}
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats()
    tokens = torch.randint(0, config.vocab_size, (size["prefill"],), generator=gen).tolist()
    prefill = ForwardBatch.build([tokens], [0], [list(range(size["prefill"] // page + 1))], device=device)
    with torch.inference_mode():
        out["prefill_ms"] = timed_ms(lambda: model.forward_batch(prefill, cache), device, size["reps"])
        out["prefill_peak_GiB"] = _peak(device) / 2**30
        for b in batches:
            tables = [list(range(i * pages_per_seq, (i + 1) * pages_per_seq)) for i in range(b)]
            decode = ForwardBatch.build([[int(t)] for t in torch.randint(0, config.vocab_size, (b,), generator=gen)],
                                        [cached] * b, tables, device=device)  # fmt: skip
            out[f"decode_B{b}_ms"] = timed_ms(lambda: model.forward_batch(decode, cache), device, size["reps"])
        out["peak_GiB"] = _peak(device) / 2**30
        ids = torch.randint(0, config.vocab_size, (1, size["check_len"]), generator=torch.Generator().manual_seed(2))
        out["logits"] = model(ids.to(device)).float()
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dry-run", action="store_true", help="tiny width on the CPU (checks the script)")
    parser.add_argument("--json", type=Path, default=None)
    parser.add_argument("--formats", default="dequant,fp8,fp8_w8a8")
    args = parser.parse_args(argv)
    if not args.dry_run and not torch.cuda.is_available():
        print("glm53_forward: no GPU; use --dry-run for the CPU check of this script")
        return 2
    device = torch.device("cpu" if args.dry_run else "cuda")
    size = SIZES["dry" if args.dry_run else "gpu"]
    config = glm53_config(args.dry_run)
    formats = args.formats.split(",")
    t0 = time.perf_counter()
    fp8_model = random_fp8_model(config, device)
    report = {"device": str(device), "width": config.hidden_size, "layers": config.num_hidden_layers,
              "fp8_weights_GiB": _bytes(fp8_model) / 2**30, "fp8_build_peak_GiB": _peak(device) / 2**30}  # fmt: skip
    dense = dequantized_copy(fp8_model) if "dequant" in formats else None
    report["dequant_weights_GiB"] = _bytes(dense) / 2**30 if dense is not None else None
    report["build_s"] = time.perf_counter() - t0
    for m in (fp8_model, dense):
        if m is not None:
            m.fuse_weights()
            m.eval()
    results = {}
    for fmt in formats:
        model = dense if fmt == "dequant" else fp8_model
        if fmt != "dequant":
            set_fp8_mode(fp8_model, fmt)
        try:
            results[fmt] = run_format(model, config, device, size)
        except Exception as exc:  # report and go on: one format's failure must not hide the others
            import traceback

            where = traceback.extract_tb(exc.__traceback__)[-1]
            results[fmt] = {"error": f"{type(exc).__name__}: {exc} ({Path(where.filename).name}:{where.lineno})"}
    ref = results.get("dequant", {}).get("logits")
    for fmt, r in results.items():
        logits = r.pop("logits", None)
        if ref is not None and logits is not None and fmt != "dequant":
            r["logits_max_abs_diff_vs_dequant"] = float((logits - ref).abs().max())
            r["logits_rel_norm_diff_vs_dequant"] = float((logits - ref).norm() / ref.norm())
            r["logits_bitwise_equal"] = bool(torch.equal(logits, ref))
    report["formats"] = results
    keys = ["prefill_ms", *[f"decode_B{b}_ms" for b in size["batches"]], "peak_GiB", "logits_rel_norm_diff_vs_dequant"]
    print(f"GLM-5.3 width {config.hidden_size}, {config.num_hidden_layers} layers on {device}: FP8 weights "
          f"{report['fp8_weights_GiB']:.4g} GiB" + (f", dequant copy {report['dequant_weights_GiB']:.4g} GiB" if dense else ""))
    print(f"{'format':>9} " + " ".join(f"{k.replace('_vs_dequant', ''):>16}" for k in keys))
    for fmt, r in results.items():
        if "error" in r:
            print(f"{fmt:>9} ERROR {r['error']}")
            continue
        print(f"{fmt:>9} " + " ".join(f"{r[k]:>16.4g}" if isinstance(r.get(k), float) else f"{'-':>16}" for k in keys))
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(report, indent=1))
    return 1 if any("error" in r for r in results.values()) else 0


if __name__ == "__main__":
    sys.exit(main())
