"""benchmarks/kernels.py --quick runs end to end (on CPU: interpreter vs reference, no timings)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[2]


def test_kernel_benchmark_quick():
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    proc = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "kernels.py"), "--quick"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-4000:]
    for name in ("indexer_scores", "indexer_topk", "sparse_mla", "fused_moe"):
        assert name in proc.stdout, out[-4000:]
    if torch.cuda.is_available():
        assert "speedup" in proc.stdout
    else:
        assert "timings need a GPU" in proc.stdout and "agree with their references" in proc.stdout
