"""FP8 block-scaled GEMM benchmark at GLM-5.3's per-rank TP8 shapes (scaleout.md §5.4).

    python benchmarks/fp8_gemm.py [--quick] [--json PATH]

Methods, each y = x @ W.T for W [N, K] (e4m3 + 128x128 fp32 block scales, or its bf16 copy):
  bf16       F.linear on a bf16 copy of W (the weight-memory baseline: 2 bytes per weight)
  dequant    dequantize W per call (Triton weight_dequant) + bf16 F.linear (W8A16, DeepSeek's default)
  w8a8       Horizon: Triton act_quant (1x128 per token) + the block-scaled FP8 GEMM
  scaled_mm  torch F.scaled_mm with BlockWise1x128 / BlockWise128x128 scales, if this torch accepts it
Reported per (shape, M): median µs (triton.testing.do_bench), weight GB/s (weight bytes / time),
TFLOP/s, and the fraction of the H200's peak HBM bandwidth and tensor-core rate. w8a8 and
scaled_mm must agree with their exact fp32 emulation (< 1e-2 relative, else the run fails); their
distance from bf16 is activation rounding, reported only. Ratios are against bf16 measured in
the same run. On CPU nothing here says anything about the GPU: it runs the torch references at
small shapes only (and says so), to keep the script itself tested.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from inference.fp8 import quantize_blockwise  # noqa: E402
from kernels.fp8_gemm import act_quant, fp8_gemm, fp8_gemm_torch, w8a8_linear, weight_dequant  # noqa: E402

ON_GPU = torch.cuda.is_available()
# NVIDIA H200 SXM datasheet: 4.8 TB/s HBM3e, 989 TFLOP/s bf16 and 1979 TFLOP/s fp8 dense.
PEAK = {"hbm_gbps": 4800.0, "bf16_tflops": 989.4, "fp8_tflops": 1978.9}
BLOCK = (128, 128)
# (name, N, K): per-rank TP8 shapes of GLM-5.3 (q_a is replicated; lm_head is bf16 in the release).
SHAPES = [
    ("q_a", 2048, 6144), ("q_b", 2048, 2048), ("kv_b", 3584, 512), ("o_proj", 6144, 2048),
    ("dense_gate_up", 3072, 6144), ("dense_down", 6144, 1536), ("expert_gate_up", 4096, 6144),
    ("expert_down", 6144, 2048), ("lm_head", 19360, 6144),
]  # fmt: skip
BF16_ONLY = {"lm_head"}
M_VALUES = (1, 8, 64, 512, 4096)
CPU_SHAPES = [("q_b/8", 256, 256), ("o_proj/8", 768, 256), ("expert_gate_up/8", 512, 768)]
CPU_M = (1, 8, 64)
ERROR_LIMIT = 1e-2


def _rel(a: torch.Tensor, b: torch.Tensor) -> float:
    a, b = a.float(), b.float()
    return float((a - b).abs().max() / b.abs().max().clamp(min=1e-30))


def _time_us(fn, quick: bool) -> float:
    if ON_GPU:
        import triton

        return 1000.0 * triton.testing.do_bench(fn, warmup=5 if quick else 25, rep=10 if quick else 50, return_mode="median")
    fn()
    times = []
    for _ in range(3 if quick else 10):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return 1e6 * statistics.median(times)


def _scaled_mm(xq, xs, wq, ws):
    """F.scaled_mm blockwise, trying the scale layouts cuBLAS documents for Hopper (outer-dim-major
    1x128 activation scales); returns (callable, None) or (None, reason)."""
    if not hasattr(F, "scaled_mm") or not hasattr(F, "ScalingType"):
        return None, "this torch has no F.scaled_mm / ScalingType"
    st = F.ScalingType
    a_scales = {"col-major": xs.t().contiguous().t(), "row-major": xs}
    b_scales = {"[N/128,K/128]": ws, "[K/128,N/128]": ws.t().contiguous(), "[K/128,N/128] view": ws.t()}
    reasons = []
    for an, sa in a_scales.items():
        for bn, sb in b_scales.items():
            def fn(sa=sa, sb=sb):
                return F.scaled_mm(xq, wq.t(), sa, st.BlockWise1x128, sb, st.BlockWise128x128, output_dtype=torch.bfloat16)

            try:
                fn()
                return fn, None
            except Exception as exc:  # layouts are backend-specific; report why none ran
                reasons.append(f"{an}/{bn}: {str(exc).splitlines()[0][:120]}")
    return None, "; ".join(reasons[:2])


def run_shape(name: str, n: int, k: int, m_values, device, quick: bool) -> list[dict]:
    gen = torch.Generator(device=device).manual_seed(0)
    w = torch.randn(n, k, device=device, generator=gen) / k**0.5
    wq, ws = quantize_blockwise(w, BLOCK)
    w16 = w.to(torch.bfloat16)
    del w
    rows = []
    for m in m_values:
        x = torch.randn(m, k, device=device, generator=gen).to(torch.bfloat16)
        methods = {"bf16": lambda: F.linear(x, w16)}
        if name not in BF16_ONLY:
            backend = "auto"
            methods["dequant"] = lambda: F.linear(x, weight_dequant(wq, ws, BLOCK, torch.bfloat16, backend=backend))
            methods["w8a8"] = lambda: w8a8_linear(x, wq, ws, BLOCK, backend=backend)
        errors: dict[str, float | str] = {}
        if name not in BF16_ONLY:
            xq, xs = act_quant(x, BLOCK[1])
            exact = fp8_gemm_torch(xq, xs, wq, ws, BLOCK, torch.float32)
            ref16 = methods["bf16"]()
            got = fp8_gemm(xq, xs, wq, ws, BLOCK, torch.bfloat16)
            errors["w8a8_vs_exact"] = _rel(got, exact)
            errors["w8a8_vs_bf16"] = _rel(got, ref16)
            if ON_GPU:
                fn, reason = _scaled_mm(xq, xs, wq, ws)
                if fn is None:
                    errors["scaled_mm"] = f"not run: {reason}"
                else:
                    errors["scaled_mm_vs_exact"] = _rel(fn(), exact)
                    methods["scaled_mm"] = fn
        base = None
        for method, fn in methods.items():
            us = _time_us(fn, quick)
            base = us if method == "bf16" else base
            weight_bytes = 2 * n * k if method == "bf16" else n * k + ws.numel() * 4
            flops = 2 * m * n * k
            tc_peak = PEAK["bf16_tflops"] if method in ("bf16", "dequant") else PEAK["fp8_tflops"]
            rows.append(dict(
                shape=name, N=n, K=k, M=m, method=method, us=us, weight_GBps=weight_bytes / us / 1e3,
                TFLOPs=flops / us / 1e6, frac_hbm=weight_bytes / us / 1e3 / PEAK["hbm_gbps"] if ON_GPU else None,
                frac_tc=flops / us / 1e6 / tc_peak if ON_GPU else None, vs_bf16=base / us if base else None, **errors,
            ))  # fmt: skip
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="shorter timing loops")
    parser.add_argument("--json", type=Path, default=None, help="write every row as JSON here")
    args = parser.parse_args(argv)
    device = torch.device("cuda" if ON_GPU else "cpu")
    if ON_GPU:
        print(f"device: {torch.cuda.get_device_name()}  torch {torch.__version__}")
        shapes, m_values = SHAPES, M_VALUES
    else:
        print("CPU: no GPU here, so this runs the torch references only, at small shapes (N, K / 8); "
              "the timings say nothing about the Triton kernels, which need a GPU")  # fmt: skip
        shapes, m_values = CPU_SHAPES, CPU_M
    rows = []
    for name, n, k in shapes:
        rows += run_shape(name, n, k, m_values, device, args.quick)
    header = f"{'shape':>16} {'N':>6} {'K':>5} {'M':>5} {'method':>9} {'us':>9} {'GB/s':>7} {'TFLOP/s':>8} {'%HBM':>5} {'%TC':>5} {'x bf16':>6}"
    print(header)
    pct = lambda f: f"{100 * f:>5.1f}" if f is not None else f"{'-':>5}"  # noqa: E731 (CPU: no peak to compare)
    for r in rows:
        print(f"{r['shape']:>16} {r['N']:>6} {r['K']:>5} {r['M']:>5} {r['method']:>9} {r['us']:>9.1f} {r['weight_GBps']:>7.1f} "
              f"{r['TFLOPs']:>8.3f} {pct(r['frac_hbm'])} {pct(r['frac_tc'])} {r['vs_bf16'] or 1.0:>6.2f}")  # fmt: skip
    failures = []
    for r in rows:
        for key in ("w8a8_vs_exact", "scaled_mm_vs_exact"):
            if isinstance(r.get(key), float) and r[key] > ERROR_LIMIT:
                failures.append(f"{r['shape']} M={r['M']} {key}={r[key]:.3g}")
    seen = {(r["shape"], r["M"]): r for r in rows if "w8a8_vs_exact" in r}
    worst = max((r["w8a8_vs_exact"] for r in seen.values()), default=0.0)
    vs16 = max((r["w8a8_vs_bf16"] for r in seen.values()), default=0.0)
    print(f"w8a8 vs its exact fp32 emulation: max rel err {worst:.2e} (limit {ERROR_LIMIT}); vs bf16 weights: {vs16:.2e} (reported)")
    notes = sorted({r["scaled_mm"] for r in rows if isinstance(r.get("scaled_mm"), str)})
    for note in notes[:1]:
        print(f"F.scaled_mm blockwise: {note}")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({"device": str(device), "rows": rows, "failures": failures}, indent=1))
    if failures:
        print("FAILED: " + "; ".join(failures))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
