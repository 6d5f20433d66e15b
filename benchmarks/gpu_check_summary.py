"""The one table at the end of scripts/gpu_check.sh, from the stages' JSON (and junit XML) files.

    python benchmarks/gpu_check_summary.py RESULTS_DIR name:rc:seconds ...

Prints each stage's status and time, then its headline numbers: kernel tests passed / failed,
each kernel against torch (and its bandwidth as a share of the device-to-device copy bandwidth
gpu_decode measured in the same run), the two MLA prefill forms, decode tokens/s and per-kernel
bandwidth per (context, batch), the engine run (tokens/s, time to first token, requests that
finished), and with --extended the FP8 GEMM, the fused FP8 MoE and the full-width forward per
weight format. Writes RESULTS_DIR/gpu_check.json with all of it; exits 1 if a stage failed.
"""

from __future__ import annotations

import json
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

GOAL_SHARE = 0.60  # issue 17: sparse MLA decode and the fused MoE at >= 60% of the copy bandwidth


def _load(results: Path, name: str) -> dict | None:
    try:
        return json.loads((results / f"{name}.json").read_text())
    except (OSError, ValueError):
        return None


def _tests(results: Path) -> dict | None:
    try:
        root = ET.parse(results / "kernel_tests.xml").getroot()
    except (OSError, ET.ParseError):
        return None
    suite = root if root.tag == "testsuite" else root.find("testsuite")
    counts = {k: int(suite.get(k, 0)) for k in ("tests", "failures", "errors", "skipped")}
    failed = [f"{c.get('classname', '').rsplit('.', 1)[-1]}::{c.get('name')}" for c in suite.iter("testcase")
              if c.find("failure") is not None or c.find("error") is not None]  # fmt: skip
    return {**counts, "failed": failed[:10]}


def _pct(gbps: float, copy: float | None) -> str:
    return f"{100 * gbps / copy:.0f}%" if copy else "-"


def tests_lines(t: dict) -> list[str]:
    passed = t["tests"] - t["failures"] - t["errors"] - t["skipped"]
    lines = [f"kernel tests: {passed} passed, {t['failures'] + t['errors']} failed, {t['skipped']} skipped"]
    return lines + [f"  FAILED {name}" for name in t["failed"]]


def kernel_lines(k: dict, copy: float | None) -> list[str]:
    lines = [f"kernels ({k['device']}): Triton vs torch; % = bandwidth / measured copy bandwidth"]
    for r in k["rows"]:
        line = f"  {r['name']:<22} {r['shape']:<44} err {r['err']:.1e}{'' if r['ok'] else ' MISMATCH'}"
        if "triton_ms" in r:
            line += (f"  torch {r['torch_ms']:.3f} ms  triton {r['triton_ms']:.3f} ms  x{r['speedup']:.2f}"
                     f"  {r['GBps']:.0f} GB/s {_pct(r['GBps'], copy)}")  # fmt: skip
        lines.append(line)
    for f in k.get("prefill_forms", []):
        lines.append(f"  prefill forms T=S={f['T']} H={f['heads']}: expanded {f['expanded_ms']:.3f} ms, absorbed "
                     f"{f['absorbed_ms']:.3f} ms (absorbed / expanded {f['absorbed_over_expanded']:.2f})")  # fmt: skip
    return lines


def decode_lines(name: str, d: dict) -> list[str]:
    copy = d["copy_GBps"]
    lines = [f"{name} ({d['device']}, width {d['width']}, {d['layers']} layers, FP8 KV, eager): % = kernel bandwidth "
             f"/ copy {copy:.0f} GB/s (goal: sparse_mla and fused_moe >= {100 * GOAL_SHARE:.0f}%)"]  # fmt: skip
    for r in d["rows"]:
        lines.append(f"  ctx {r['context']:>6} B {r['batch']:>3}: {r['step_ms']:.2f} ms/step {r['tokens_per_s']:.0f} tok/s"
                     f"; indexer {_pct(r['indexer_GBps'], copy)} sparse_mla {_pct(r['sparse_mla_GBps'], copy)}"
                     f" fused_moe {_pct(r['fused_moe_GBps'], copy)}")  # fmt: skip
    return lines


def engine_lines(e: dict) -> list[str]:
    head = f"engine ({e['device']}, {e['preset']}, horizon serve, FP8 weights + FP8 KV)"
    if "error" in e:
        return [f"{head}: ERROR {e['error']}"]
    ms = lambda s: "-" if s is None else f"{1e3 * s:.0f} ms"  # noqa: E731
    return [f"{head}: checkpoint written in {e.get('checkpoint_write_s', 0):.1f} s, server up in "
            f"{e['server_start_s']:.1f} s, warm-up requests {e['warmup_s']:.1f} s",
            f"  {e['finished']}/{e['requests']} requests finished ({e['max_tokens']} new tokens each, prompts "
            f"{e['prompt_tokens'][0]}-{e['prompt_tokens'][1]} tokens) in {e['wall_s']:.1f} s: "
            f"{e['tokens_per_s']:.1f} tok/s, TTFT p50 {ms(e['ttft_p50_s'])} p99 {ms(e['ttft_p99_s'])}"]  # fmt: skip


def gemm_lines(gemm: dict) -> list[str]:
    rows = gemm["rows"]
    ms = sorted({r["M"] for r in rows})
    lines = [f"fp8_gemm ({gemm['device']}): time relative to bf16 F.linear (>1 = faster), µs of w8a8",
             f"{'shape':>16} {'M':>5} {'w8a8':>6} {'dequant':>8} {'scaled_mm':>9} {'w8a8 us':>8} {'err':>8}"]  # fmt: skip
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
    return lines


def moe_lines(moe: dict) -> list[str]:
    lines = [f"fused_moe_fp8 ({moe['device']}): µs per method, x = speed vs the per-expert bf16 loop"]
    for r in moe["rows"]:
        lines.append(f"  T={r['T']:>5} pairs={r['pairs']:>5} {r['method']:>10} {r['us']:>10.1f} us  x{r['vs_loop']:.2f}"
                     f"  {r['weight_GBps']:.0f} GB/s")  # fmt: skip
    return lines


def forward_lines(fwd: dict) -> list[str]:
    lines = [f"glm53_forward ({fwd['device']}, width {fwd['width']}, {fwd['layers']} layers): FP8 weights "
             f"{fwd['fp8_weights_GiB']:.2f} GiB, dequant copy {fwd.get('dequant_weights_GiB') or 0:.2f} GiB, "
             f"build peak {fwd['fp8_build_peak_GiB']:.2f} GiB"]  # fmt: skip
    for fmt, r in fwd["formats"].items():
        if "error" in r:
            lines.append(f"  {fmt:>9}: ERROR {r['error']}")
            continue
        timing = ", ".join(f"{k[:-3]} {v:.2f} ms" for k, v in r.items() if k.endswith("_ms"))
        diff = r.get("logits_rel_norm_diff_vs_dequant")
        lines.append(f"  {fmt:>9}: {timing}; peak {r['peak_GiB']:.2f} GiB"
                     + ("" if diff is None else f"; logits vs dequant rel {diff:.2e} (bitwise {r['logits_bitwise_equal']})"))
    return lines


def main(argv: list[str]) -> int:
    results = Path(argv[0])
    stages = [s.split(":") for s in argv[1:]]
    lines = ["", "==== gpu_check summary ====", f"{'stage':>15} {'status':>8} {'seconds':>8}"]
    for name, rc, secs in stages:
        status = "ok" if rc == "0" else ("timeout" if rc == "124" else f"rc={rc}")
        lines.append(f"{name:>15} {status:>8} {secs:>8}")
    found = {name: _load(results, name) for name in ("kernels", "gpu_decode", "gpu_decode_full", "engine", "fp8_gemm",
                                                     "fused_moe_fp8", "glm53_forward")}  # fmt: skip
    found["kernel_tests"] = _tests(results)
    copy = next((d["copy_GBps"] for d in (found["gpu_decode"], found["gpu_decode_full"]) if d), None)
    sections = [("kernel_tests", tests_lines), ("kernels", lambda k: kernel_lines(k, copy)),
                ("gpu_decode", lambda d: decode_lines("gpu_decode", d)),
                ("gpu_decode_full", lambda d: decode_lines("gpu_decode (full sizes)", d)), ("engine", engine_lines),
                ("fp8_gemm", gemm_lines), ("fused_moe_fp8", moe_lines), ("glm53_forward", forward_lines)]  # fmt: skip
    for name, render in sections:
        if found[name]:
            lines += render(found[name])
    print("\n".join(lines))
    summary = {"stages": [dict(name=n, rc=int(rc), seconds=int(s)) for n, rc, s in stages], **found}
    (results / "gpu_check.json").write_text(json.dumps(summary, indent=1))
    return 0 if all(rc == "0" for _, rc, _ in stages) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
