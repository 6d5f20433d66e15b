"""GPU decode: tokens/s and time per step of a scaled-down GLM-5.3, and each DSA/MoE kernel's
achieved HBM bandwidth as a fraction of the device's copy bandwidth measured in the same run.

    python benchmarks/gpu_decode.py [--quick] [--json PATH] [--cuda-graphs] [--dry-run]

Model: GLM-5.3 at full width (benchmarks/glm53_forward.py: hidden 6144, 64 heads, 256 experts,
indexer 32 x 128 top-2048), 2 layers (1 dense + 1 MoE), random FP8 weights drawn on the GPU,
W8A8 (act_quant + block-scaled FP8 GEMM / fused FP8 MoE), an FP8 KV cache (fp8_ds_mla latent +
FP8 indexer pages) filled with random rows. Decode steps at batch 1, 16, 64 over 8K and 64K
cached tokens per sequence (every sequence on its own pages), eager, through the Triton kernels.

Kernel bandwidth: the fused indexer top-k over the FP8 pages, sparse MLA over the selected
fp8_ds_mla rows and the fused FP8 MoE, each timed alone at the step's shapes; bytes = what the
kernel must read (keys of every visible position; the 2048 selected rows per token; the weights
of the experts the batch routes to) over its time, divided by a device-to-device copy's
(read + write) bandwidth.

--cuda-graphs: each step also through the engine's decode path (inference/engine/decode_graphs.py:
inputs staged into fixed buffers, one host->device copy), eagerly and replayed as a CUDA graph
captured for the step's batch and width bucket; at batch 1 the graph step is set against the sum
of its kernels' device times (an eager step under torch.profiler): the launch overhead a graph
leaves (goal: within 1.3x). Without a GPU it prints that it needs one and exits 0; --dry-run runs
the same code on the CPU at a tiny width through the kernels' torch references (the "graph"
column then runs the same buffers eagerly: no capture on a CPU; no timings worth reading).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.glm53_forward import fill_random_cache as fill_cache  # noqa: E402
from benchmarks.glm53_forward import glm53_config, random_fp8_model  # noqa: E402
from benchmarks.glm53_forward import sync, timed_ms as _ms  # noqa: E402
from inference.engine.decode_graphs import DecodeGraphs, GraphSettings, Signature  # noqa: E402
from inference.forward_batch import ForwardBatch  # noqa: E402
from inference.fp8_resident import set_fp8_mode  # noqa: E402
from inference.layers.fp8_experts import Fp8RoutedExperts  # noqa: E402
from kernels.fp8_cache import latent_row_bytes  # noqa: E402
from kernels.fused_moe_fp8 import fused_moe_fp8  # noqa: E402
from kernels.indexer_topk_fused import indexer_topk_fp8  # noqa: E402
from kernels.sparse_mla_fp8 import sparse_mla_fp8_attention  # noqa: E402

SIZES = {"full": dict(contexts=(8192, 65536), batches=(1, 16, 64), reps=5, page=64),
         "quick": dict(contexts=(8192,), batches=(1, 16), reps=3, page=64),
         "dry": dict(contexts=(96,), batches=(1, 2), reps=1, page=16)}  # fmt: skip


def copy_gbps(device, reps: int) -> float:
    """Device-to-device copy of 1 GiB: (read + write) bytes per second, in GB/s."""
    n = (1 << 30) if device.type == "cuda" else (1 << 22)
    src, dst = torch.empty(n, dtype=torch.uint8, device=device), torch.empty(n, dtype=torch.uint8, device=device)
    return 2 * n / _ms(lambda: dst.copy_(src), device, reps) / 1e6


def kernel_rows(model, cache, config, b, ctx, tables, device, reps, backend) -> dict:
    """Time each kernel alone at this step's shapes; returns ms and GB/s per kernel."""
    page = cache.page_size
    gen = torch.Generator(device=device).manual_seed(b)
    table = torch.tensor(tables, device=device)
    pos = torch.arange(ctx + 1, device=device)
    key_slots = (table[:, pos // page] * page + pos % page).to(torch.int32)
    seq = torch.arange(b, device=device, dtype=torch.int32)
    qpos = torch.full((b,), ctx, device=device, dtype=torch.int32)
    layer = next(iter(cache.indexer))
    keys = cache.indexer_rows(layer)
    q = torch.randn(b, config.index_n_heads, config.index_head_dim, device=device, generator=gen).to(model.dtype)
    w = torch.randn(b, config.index_n_heads, device=device, generator=gen)
    topk, scale = config.index_topk, config.index_head_dim**-0.5
    run_idx = lambda: indexer_topk_fp8(q, w, keys.storage, page, key_slots, seq, qpos, topk, scale, backend=backend)  # noqa: E731
    sel = run_idx().slots
    out = {"indexer_ms": _ms(run_idx, device, reps)}
    out["indexer_bytes"] = b * (ctx + 1) * (keys.storage.shape[1] // page + 4)  # key + scale bytes, slot id

    rows = cache.latent_rows(0)
    ql = torch.randn(b, config.num_attention_heads, config.latent_dim, device=device, generator=gen).to(model.dtype)
    run_mla = lambda: sparse_mla_fp8_attention(ql, rows.flat, sel, config.qk_head_dim**-0.5, config.kv_lora_rank, backend=backend)  # noqa: E731
    out["sparse_mla_ms"] = _ms(run_mla, device, reps)
    row_bytes = latent_row_bytes(config.kv_lora_rank, config.qk_rope_head_dim, model.dtype)
    out["sparse_mla_bytes"] = int((sel >= 0).sum()) * (row_bytes + 4) + 2 * ql.numel() * ql.element_size()

    experts = next(m for m in model.modules() if isinstance(m, Fp8RoutedExperts))
    x = torch.randn(b, config.hidden_size, device=device, generator=gen).to(model.dtype)
    ids = torch.stack([torch.randperm(config.n_routed_experts, device=device, generator=gen)[: config.num_experts_per_tok]
                       for _ in range(b)]).to(torch.int32)  # fmt: skip
    weights = torch.rand(b, config.num_experts_per_tok, device=device, generator=gen)
    args = (x, experts.gate_up_proj, experts.gate_up_proj_scale_inv, experts.down_proj, experts.down_proj_scale_inv, ids, weights)
    out["fused_moe_ms"] = _ms(lambda: fused_moe_fp8(*args, backend=backend), device, reps)
    per_expert = sum(t[0].numel() * t.element_size() for t in args[1:5])
    out["fused_moe_bytes"] = int(torch.unique(ids).numel()) * per_expert
    for name in ("indexer", "sparse_mla", "fused_moe"):
        out[f"{name}_GBps"] = out[f"{name}_bytes"] / out[f"{name}_ms"] / 1e6
    return out


def kernel_sum_ms(fn, device, reps: int) -> float | None:
    """Sum of the device times of every kernel one call of fn launches (torch.profiler), in ms."""
    if device.type != "cuda":
        return None
    from torch.profiler import ProfilerActivity, profile

    fn()
    sync(device)
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(reps):
            fn()
        sync(device)
    return sum(e.self_device_time_total for e in prof.key_averages()) / reps / 1e3


def graph_rows(graphs: dict, b: int, ctx: int, tokens, tables, device, reps: int) -> dict:
    """The engine's decode path for this step: eager through fixed buffers, and as a CUDA graph."""
    eager, graph = graphs["eager"], graphs["graph"]
    args = (tokens, [ctx] * b, tables, b, False)
    shape = graph.shape_for(b, 1, -(-(ctx + 1) // graph.cache.page_size))
    if graph.mode == "cuda_graphs":
        graph.capture(Signature("target", 1, False), shape)
    out = {"bucket": list(shape), "buffers_eager_ms": _ms(lambda: eager.target(*args), device, reps),
           "graph_ms": _ms(lambda: graph.target(*args), device, reps)}  # fmt: skip
    if b == 1:
        out["kernels_ms"] = kernel_sum_ms(lambda: eager.target(*args), device, reps)
    return out


def _graphs(model, cache, config, batches, contexts, device) -> dict:
    """Two runners over the benchmark's cache: eager (no padding) and CUDA graphs (the last page
    of the cache is the padding rows' scratch page); on a CPU both run eagerly."""
    mode = "cuda_graphs" if device.type == "cuda" else "eager"
    build = lambda m, pad: GraphSettings.build(config, m, max(batches), max(contexts) + 1, cache.page_size,  # noqa: E731
                                               pad_page=pad)
    return {"eager": DecodeGraphs(model, cache, build("eager", None)),
            "graph": DecodeGraphs(model, cache, build(mode, cache.num_pages - 1))}  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="8K context, batch 1 and 16 only")
    parser.add_argument("--dry-run", action="store_true", help="tiny width on the CPU (checks the script)")
    parser.add_argument("--cuda-graphs", action="store_true", help="also time the engine's decode path, eager and CUDA graphs")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args(argv)
    if not args.dry_run and not torch.cuda.is_available():
        print("gpu_decode: needs a GPU (CUDA); nothing measured. --dry-run checks the script on the CPU.")
        return 0
    device = torch.device("cpu" if args.dry_run else "cuda")
    size = SIZES["dry" if args.dry_run else ("quick" if args.quick else "full")]
    backend = "torch" if args.dry_run else "triton"
    config = glm53_config(args.dry_run)
    model = random_fp8_model(config, device)
    model.fuse_weights()
    model.eval()
    set_fp8_mode(model, "fp8_w8a8")
    model.kernel_backend = backend  # decode through the kernels (on the CPU: their torch references)
    page, batches, contexts = size["page"], size["batches"], size["contexts"]
    pages_per_seq = max(contexts) // page + 2
    cache = model.new_cache(max(batches) * pages_per_seq + 1, page, kv_cache_dtype="fp8")
    fill_cache(model, cache, config, device)
    graphs = _graphs(model, cache, config, batches, contexts, device) if args.cuda_graphs else None
    report = {"device": torch.cuda.get_device_name() if device.type == "cuda" else "cpu",
              "copy_GBps": copy_gbps(device, size["reps"]), "width": config.hidden_size,
              "layers": config.num_hidden_layers, "rows": []}  # fmt: skip
    gen = torch.Generator().manual_seed(0)
    with torch.inference_mode():
        for ctx in contexts:
            for b in batches:
                tables = [list(range(i * pages_per_seq, (i + 1) * pages_per_seq)) for i in range(b)]
                tokens = [[int(t)] for t in torch.randint(0, config.vocab_size, (b,), generator=gen)]
                step = ForwardBatch.build(tokens, [ctx] * b, tables, device=device)
                ms = _ms(lambda: model.forward_batch(step, cache), device, size["reps"])
                row = {"context": ctx, "batch": b, "step_ms": ms, "tokens_per_s": b / ms * 1e3}
                row.update(kernel_rows(model, cache, config, b, ctx, tables, device, size["reps"], backend))
                if graphs is not None:
                    row.update(graph_rows(graphs, b, ctx, tokens, tables, device, size["reps"]))
                report["rows"].append(row)
    copy = report["copy_GBps"]
    print(f"gpu_decode on {report['device']}: GLM-5.3 width {config.hidden_size}, {config.num_hidden_layers} layers, "
          f"FP8 weights (w8a8) + FP8 KV cache, eager; copy bandwidth {copy:.0f} GB/s (read + write)")  # fmt: skip
    print(f"{'context':>8} {'batch':>5} {'step ms':>9} {'tok/s':>9} | {'indexer ms':>10} {'%copy':>6} | "
          f"{'sparse_mla ms':>13} {'%copy':>6} | {'fused_moe ms':>12} {'%copy':>6}")  # fmt: skip
    for r in report["rows"]:
        print(f"{r['context']:>8} {r['batch']:>5} {r['step_ms']:>9.3f} {r['tokens_per_s']:>9.1f} | "
              f"{r['indexer_ms']:>10.3f} {100 * r['indexer_GBps'] / copy:>5.0f}% | "
              f"{r['sparse_mla_ms']:>13.3f} {100 * r['sparse_mla_GBps'] / copy:>5.0f}% | "
              f"{r['fused_moe_ms']:>12.3f} {100 * r['fused_moe_GBps'] / copy:>5.0f}%")  # fmt: skip
    if graphs is not None:
        graph = graphs["graph"]
        print(f"decode path ({graph.describe()}): ms/step through the fixed buffers, eager vs graph")
        print(f"{'context':>8} {'batch':>5} {'bucket':>12} {'eager ms':>9} {'graph ms':>9} {'speedup':>7} "
              f"{'graph tok/s':>11} | {'kernels ms':>10} {'graph/kernels':>13}")  # fmt: skip
        for r in report["rows"]:
            kernels = r.get("kernels_ms")
            tail = f"{kernels:>10.3f} {r['graph_ms'] / kernels:>12.2f}x" if kernels else f"{'-':>10} {'-':>13}"
            print(f"{r['context']:>8} {r['batch']:>5} {str(tuple(r['bucket'][::2])):>12} {r['buffers_eager_ms']:>9.3f} "
                  f"{r['graph_ms']:>9.3f} {r['buffers_eager_ms'] / r['graph_ms']:>6.2f}x "
                  f"{r['batch'] / r['graph_ms'] * 1e3:>11.1f} | {tail}")  # fmt: skip
    if args.dry_run:
        print("(dry run on the CPU through the torch references: timings need a GPU; no CUDA graph is captured "
              "on a CPU, the graph column runs the same buffers eagerly)")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
