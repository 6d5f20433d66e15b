"""FP8 fused MoE benchmark: one rank's routed experts under EP8 on GLM-5.3 (scaleout.md §5.4).

    python benchmarks/fused_moe_fp8.py [--quick] [--json PATH]

The EP8-local problem: 32 local experts (of 256), T tokens x 8 picks over all 256 experts, so
about T (token, expert) pairs land on this rank; the other picks are foreign ids (-1) the kernels
skip. H 6144, moe_intermediate 2048, T in {1, 64, 1024}. Methods:
  fp8_fused   kernels.fused_moe_fp8 (Triton; W8A8, 128x128 block scales)
  bf16_fused  kernels.fused_moe (Triton; bf16 experts)
  bf16_loop   one F.linear pair per active expert (torch; what RoutedExperts does without kernels)
Reported: median µs, GB/s of the active experts' weight bytes, TFLOP/s, fraction of the H200's
peak (HBM, tensor cores), and speed relative to bf16_loop measured in the same run. fp8_fused must
agree with its torch reference (< 1e-2 of the output scale, else the run fails); its distance from
the bf16 experts is activation rounding, reported only. On CPU it runs the torch references only,
at small shapes, and says so.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.fp8_gemm import ERROR_LIMIT, ON_GPU, PEAK, _time_us  # noqa: E402
from inference.fp8 import dequantize_blockwise, quantize_blockwise  # noqa: E402
from kernels.fused_moe import fused_moe  # noqa: E402
from kernels.fused_moe_fp8 import fused_moe_fp8  # noqa: E402

GPU_PROBLEM = dict(H=6144, I=2048, E_total=256, E_local=32, top_k=8, tokens=(1, 64, 1024), block=(128, 128))
CPU_PROBLEM = dict(H=256, I=128, E_total=64, E_local=8, top_k=8, tokens=(1, 16), block=(128, 128))


def _bf16_loop(x, gate_up, down, ids, weights):
    out = torch.zeros(x.shape[0], x.shape[1], dtype=torch.float32, device=x.device)
    for e in torch.unique(ids[ids >= 0]).tolist():
        tok, slot = (ids == e).nonzero(as_tuple=True)
        gate, up = F.linear(x[tok], gate_up[e]).chunk(2, dim=-1)
        y = F.linear(F.silu(gate) * up, down[e]).float() * weights[tok, slot, None]
        out.index_add_(0, tok, y)
    return out.to(x.dtype)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="shorter timing loops")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args(argv)
    device = torch.device("cuda" if ON_GPU else "cpu")
    p = GPU_PROBLEM if ON_GPU else CPU_PROBLEM
    if not ON_GPU:
        print("CPU: no GPU here, so this runs the torch references only (fp8 reference, bf16 reference, "
              "per-expert loop) at small shapes; the timings say nothing about the Triton kernels")  # fmt: skip
    H, I, E, k, block = p["H"], p["I"], p["E_local"], p["top_k"], p["block"]
    gen = torch.Generator(device=device).manual_seed(0)
    gu_q, gu_s = quantize_blockwise(torch.randn(E, 2 * I, H, device=device, generator=gen) / H**0.5, block)
    dn_q, dn_s = quantize_blockwise(torch.randn(E, H, I, device=device, generator=gen) / I**0.5, block)
    gu16 = dequantize_blockwise(gu_q, gu_s, block, torch.bfloat16)
    dn16 = dequantize_blockwise(dn_q, dn_s, block, torch.bfloat16)
    backend = "auto"
    rows = []
    for T in p["tokens"]:
        x = torch.randn(T, H, device=device, generator=gen).to(torch.bfloat16)
        picks = torch.rand(T, p["E_total"], device=device, generator=gen).topk(k, dim=-1).indices
        ids = torch.where(picks < E, picks, -1)  # foreign experts: another rank's
        weights = torch.rand(T, k, device=device, generator=gen)
        pairs = int((ids >= 0).sum())
        active = int(torch.unique(ids[ids >= 0]).numel())
        methods = {
            "fp8_fused": lambda: fused_moe_fp8(x, gu_q, gu_s, dn_q, dn_s, ids, weights, block, backend=backend),
            "bf16_fused": lambda: fused_moe(x, gu16, dn16, ids, weights, backend=backend),
            "bf16_loop": lambda: _bf16_loop(x, gu16, dn16, ids, weights),
        }
        ref = fused_moe_fp8(x, gu_q, gu_s, dn_q, dn_s, ids, weights, block, backend="torch").float()
        got = methods["fp8_fused"]().float()
        w16 = methods["bf16_loop"]().float()
        scale = ref.abs().max().clamp(min=1e-30)
        err_ref = float((got - ref).abs().max() / scale)
        err_16 = float((got - w16).abs().max() / w16.abs().max().clamp(min=1e-30))
        times = {m: _time_us(fn, args.quick) for m, fn in methods.items()}
        for m, us in times.items():
            per_weight = 1 if m == "fp8_fused" else 2
            weight_bytes = active * 3 * H * I * per_weight
            flops = 2 * pairs * 3 * H * I
            tc = PEAK["fp8_tflops"] if m == "fp8_fused" else PEAK["bf16_tflops"]
            rows.append(dict(
                T=T, pairs=pairs, active_experts=active, method=m, us=us, weight_GBps=weight_bytes / us / 1e3,
                TFLOPs=flops / us / 1e6, frac_hbm=weight_bytes / us / 1e3 / PEAK["hbm_gbps"] if ON_GPU else None,
                frac_tc=flops / us / 1e6 / tc if ON_GPU else None, vs_loop=times["bf16_loop"] / us,
                fp8_vs_reference=err_ref, fp8_vs_bf16=err_16,
            ))  # fmt: skip
    print(f"E_local={E} of {p['E_total']}, top-{k}, H={H}, I={I}, block={block}")
    print(f"{'T':>5} {'pairs':>6} {'experts':>7} {'method':>10} {'us':>10} {'GB/s':>8} {'TFLOP/s':>8} {'%HBM':>5} {'%TC':>5} {'x loop':>6}")
    pct = lambda f: f"{100 * f:>5.1f}" if f is not None else f"{'-':>5}"  # noqa: E731
    for r in rows:
        print(f"{r['T']:>5} {r['pairs']:>6} {r['active_experts']:>7} {r['method']:>10} {r['us']:>10.1f} {r['weight_GBps']:>8.1f} "
              f"{r['TFLOPs']:>8.3f} {pct(r['frac_hbm'])} {pct(r['frac_tc'])} {r['vs_loop']:>6.2f}")  # fmt: skip
    worst = max(r["fp8_vs_reference"] for r in rows)
    print(f"fp8_fused vs its torch reference: max rel err {worst:.2e} (limit {ERROR_LIMIT}); "
          f"vs bf16 experts: {max(r['fp8_vs_bf16'] for r in rows):.2e} (reported)")
    failures = [f"T={r['T']}: {r['fp8_vs_reference']:.3g}" for r in rows if r["fp8_vs_reference"] > ERROR_LIMIT]
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({"device": str(device), "problem": {k_: v for k_, v in p.items()}, "rows": rows,
                                         "failures": failures}, indent=1))  # fmt: skip
    if failures:
        print("FAILED: fp8_fused disagrees with its reference: " + "; ".join(failures))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
