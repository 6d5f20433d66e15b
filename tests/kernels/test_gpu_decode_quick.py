"""benchmarks/gpu_decode.py: --quick runs end to end (on CPU: says it needs a GPU, exits 0), and
--dry-run runs the whole script on the CPU at a tiny width through the kernels' torch references."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[2]


def _run(*flags: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(ROOT / "benchmarks" / "gpu_decode.py"), *flags], cwd=ROOT,
                          capture_output=True, text=True, timeout=600)  # fmt: skip


def test_quick():
    proc = _run("--quick", "--cuda-graphs")
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-4000:]
    if torch.cuda.is_available():
        assert "tok/s" in proc.stdout and "graph/kernels" in proc.stdout, out[-4000:]
    else:
        assert "needs a GPU" in proc.stdout, out[-4000:]


def test_dry_run_prints_the_table(tmp_path):
    proc = _run("--dry-run", "--cuda-graphs", "--json", str(tmp_path / "d.json"))
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-4000:]
    assert "tok/s" in proc.stdout and "sparse_mla ms" in proc.stdout and "graph ms" in proc.stdout
    import json

    rows = json.loads((tmp_path / "d.json").read_text())["rows"]
    assert [(r["context"], r["batch"]) for r in rows] == [(96, 1), (96, 2)]
    assert all(r["tokens_per_s"] > 0 and r["indexer_bytes"] > 0 and r["fused_moe_bytes"] > 0 for r in rows)
    assert all(r["graph_ms"] > 0 and r["buffers_eager_ms"] > 0 for r in rows)
    # Buckets (batch, tokens, width): widths of at least index_topk + 1 keys (pages of 16).
    assert [r["bucket"] for r in rows] == [[1, 1, 7], [2, 1, 7]]
