"""The one table at the end of scripts/gpu_check.sh, from the stages' JSON files.

    python benchmarks/gpu_check_summary.py RESULTS_DIR name:rc:seconds ...

Prints each stage's status and time, then the headline numbers: FP8 GEMM (w8a8) and dequant-per-
call speed relative to bf16 per shape at the smallest and largest M, the fused MoE per T, and the
2-layer forward per weight format. Writes RESULTS_DIR/gpu_check.json with all of it.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path


def _load(results: Path, name: str) -> dict | None:
    path = results / f"{name}.json"
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def main(argv: list[str]) -> int:
    results = Path(argv[0])
    stages = [s.split(":") for s in argv[1:]]
    lines = ["", "==== gpu_check summary ====", f"{'stage':>14} {'status':>8} {'seconds':>8}"]
    for name, rc, secs in stages:
        status = "ok" if rc == "0" else ("timeout" if rc == "124" else f"rc={rc}")
        lines.append(f"{name:>14} {status:>8} {secs:>8}")
    gemm = _load(results, "fp8_gemm")
    if gemm:
        rows = gemm["rows"]
        ms = sorted({r["M"] for r in rows})
        lines.append(f"fp8_gemm ({gemm['device']}): time relative to bf16 F.linear (>1 = faster), µs of w8a8")
        lines.append(f"{'shape':>16} {'M':>5} {'w8a8':>6} {'dequant':>8} {'scaled_mm':>9} {'w8a8 us':>8} {'err':>8}")
        for m in (ms[0], ms[-1]):
            for r in rows:
                if r["M"] != m or r["method"] != "bf16":
                    continue
                by = {x["method"]: x for x in rows if x["shape"] == r["shape"] and x["M"] == m}
                f = lambda k: f"{by[k]['vs_bf16']:.2f}" if k in by else "-"  # noqa: E731
                err = by.get("w8a8", {}).get("w8a8_vs_exact")
                us = f"{by['w8a8']['us']:.1f}" if "w8a8" in by else "-"
                lines.append(f"{r['shape']:>16} {m:>5} {f('w8a8'):>6} {f('dequant'):>8} {f('scaled_mm'):>9} {us:>8} "
                             f"{err if err is None else format(err, '.1e'):>8}")  # fmt: skip
    moe = _load(results, "fused_moe_fp8")
    if moe:
        lines.append(f"fused_moe_fp8 ({moe['device']}): µs per method, x = speed vs the per-expert bf16 loop")
        for r in moe["rows"]:
            lines.append(f"  T={r['T']:>5} pairs={r['pairs']:>5} {r['method']:>10} {r['us']:>10.1f} us  x{r['vs_loop']:.2f}"
                         f"  {r['weight_GBps']:.0f} GB/s")  # fmt: skip
    fwd = _load(results, "glm53_forward")
    if fwd:
        lines.append(f"glm53_forward ({fwd['device']}, width {fwd['width']}, {fwd['layers']} layers): FP8 weights "
                     f"{fwd['fp8_weights_GiB']:.2f} GiB, dequant copy {fwd.get('dequant_weights_GiB') or 0:.2f} GiB, "
                     f"build peak {fwd['fp8_build_peak_GiB']:.2f} GiB")  # fmt: skip
        for fmt, r in fwd["formats"].items():
            if "error" in r:
                lines.append(f"  {fmt:>9}: ERROR {r['error']}")
                continue
            timing = ", ".join(f"{k[:-3]} {v:.2f} ms" for k, v in r.items() if k.endswith("_ms"))
            diff = r.get("logits_rel_norm_diff_vs_dequant")
            lines.append(f"  {fmt:>9}: {timing}; peak {r['peak_GiB']:.2f} GiB"
                         + ("" if diff is None else f"; logits vs dequant rel {diff:.2e} (bitwise {r['logits_bitwise_equal']})"))
    dec = _load(results, "gpu_decode")
    if dec:
        copy = dec["copy_GBps"]
        lines.append(f"gpu_decode ({dec['device']}, width {dec['width']}, {dec['layers']} layers, FP8 KV, eager): "
                     f"% = kernel bandwidth / copy {copy:.0f} GB/s")  # fmt: skip
        for r in dec["rows"]:
            lines.append(f"  ctx {r['context']:>6} B {r['batch']:>3}: {r['step_ms']:.2f} ms/step {r['tokens_per_s']:.0f} tok/s"
                         f"; indexer {100 * r['indexer_GBps'] / copy:.0f}% sparse_mla {100 * r['sparse_mla_GBps'] / copy:.0f}%"
                         f" fused_moe {100 * r['fused_moe_GBps'] / copy:.0f}%")  # fmt: skip
    print("\n".join(lines))
    summary = {"stages": [dict(name=n, rc=int(rc), seconds=int(s)) for n, rc, s in stages],
               "fp8_gemm": gemm, "fused_moe_fp8": moe, "glm53_forward": fwd, "gpu_decode": dec}  # fmt: skip
    (results / "gpu_check.json").write_text(json.dumps(summary, indent=1))
    return 0 if all(rc == "0" for _, rc, _ in stages) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
