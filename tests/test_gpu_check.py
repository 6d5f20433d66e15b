"""scripts/gpu_check.sh --dry-run: every stage of the GPU script runs on the CPU at tiny sizes, so a
typo in it never costs device time; the summary table and JSON come out."""

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
    proc = subprocess.run(["bash", str(ROOT / "scripts" / "gpu_check.sh"), "--dry-run"], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=900)  # fmt: skip
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-6000:]
    assert "==== gpu_check summary ====" in out and "failed" not in out, out[-6000:]
    assert "CPU: no GPU here, so this runs the torch references only" in out
    summary = json.loads((tmp_path / "gpu_check.json").read_text())
    assert [s["name"] for s in summary["stages"]] == ["kernel_tests", "fp8_gemm", "fused_moe_fp8", "glm53_forward",
                                                      "gpu_decode"]
    fwd = summary["glm53_forward"]["formats"]
    assert set(fwd) == {"dequant", "fp8", "fp8_w8a8"} and not any("error" in r for r in fwd.values())
    assert fwd["fp8"]["logits_bitwise_equal"] is True  # per-call dequant == dequant-at-load
    assert 0 < fwd["fp8_w8a8"]["logits_rel_norm_diff_vs_dequant"] < 0.2
    assert summary["fp8_gemm"]["rows"] and summary["fused_moe_fp8"]["rows"]
    assert len(summary["gpu_decode"]["rows"]) == 2 and "gpu_decode (cpu" in out
