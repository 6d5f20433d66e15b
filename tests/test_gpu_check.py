"""scripts/gpu_check.sh --dry-run --extended: every stage of the GPU script runs on the CPU at tiny
sizes (the engine stage serves a tiny random FP8 checkpoint to 64 concurrent requests), so a typo
in it never costs device time; the summary table and JSON come out."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_gpu_check_dry_run(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env.update(OUT=str(tmp_path), PYTHON=sys.executable)
    proc = subprocess.run(["bash", str(ROOT / "scripts" / "gpu_check.sh"), "--dry-run", "--extended"], cwd=ROOT,
                          env=env, capture_output=True, text=True, timeout=900)  # fmt: skip
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-6000:]
    assert "==== gpu_check summary ====" in out and "!!!" not in out, out[-6000:]  # "!!!" marks a failed stage
    summary = json.loads((tmp_path / "gpu_check.json").read_text())
    assert [s["name"] for s in summary["stages"]] == ["kernel_tests", "kernels", "gpu_decode", "engine", "fp8_gemm",
                                                      "fused_moe_fp8", "glm53_forward"]  # fmt: skip
    tests = summary["kernel_tests"]
    assert tests["tests"] > 0 and tests["failures"] == tests["errors"] == 0
    assert [r["name"] for r in summary["kernels"]["rows"]] == ["mla_prefill"] and summary["kernels"]["rows"][0]["ok"]
    assert len(summary["gpu_decode"]["rows"]) == 2 and "gpu_decode (cpu" in out
    engine = summary["engine"]
    assert engine["finished"] == engine["requests"] == 64 and engine["completion_tokens"] == 64 * engine["max_tokens"]
    assert 0 < engine["ttft_p50_s"] <= engine["ttft_p99_s"] and engine["tokens_per_s"] > 0
    assert "64/64 requests finished" in out
    fwd = summary["glm53_forward"]["formats"]
    assert set(fwd) == {"dequant", "fp8", "fp8_w8a8"} and not any("error" in r for r in fwd.values())
    assert fwd["fp8"]["logits_bitwise_equal"] is True  # per-call dequant == dequant-at-load
    assert 0 < fwd["fp8_w8a8"]["logits_rel_norm_diff_vs_dequant"] < 0.2
    assert summary["fp8_gemm"]["rows"] and summary["fused_moe_fp8"]["rows"]
    assert "CPU: no GPU here, so this runs the torch references only" in out
