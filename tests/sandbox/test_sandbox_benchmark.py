"""The latency benchmark runs end to end in its quick mode (numbers are printed, not asserted)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_sandbox_latency_quick(base_image):
    out = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "sandbox_latency.py"), "--quick"],
                         capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert out.returncode == 0, out.stderr
    for name in ("start to first command", "persistent shell", "docker exec (SDK)", "ratio persistent shell"):
        assert name in out.stdout
