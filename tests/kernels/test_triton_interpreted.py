"""Runs triton_kernels/ (Triton kernel vs torch reference) under the Triton interpreter.

The interpreter only works when TRITON_INTERPRET=1 is set before triton's first import, which a
full-suite process cannot guarantee, so the tests run in a fresh pytest subprocess. The interpreter
is single-threaded Python and numpy while the outer pytest only waits, so the subprocess runs two
pytest-xdist workers where there are two cores (on CI's two cores the second one was idle).
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]


def _workers() -> list[str]:
    if (os.cpu_count() or 1) < 2 or importlib.util.find_spec("xdist") is None:
        return []
    return ["-n", "2"]


def test_triton_kernels_match_references_under_the_interpreter():
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    proc = subprocess.run(
        [
            sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-rfE",
            "--confcutdir", str(HERE), *_workers(), str(HERE / "triton_kernels"),
        ],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0, f"interpreted Triton tests failed (rc={proc.returncode}):\n{output[-6000:]}"
    assert " passed" in output and "skipped" not in output, output[-2000:]
