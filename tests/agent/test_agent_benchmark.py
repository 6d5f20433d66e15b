"""benchmarks/agent_compaction.py --quick runs end to end and staged compaction beats the baseline."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_compaction_benchmark_quick():
    out = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "agent_compaction.py"), "--quick"],
                         capture_output=True, text=True, timeout=300, check=True).stdout
    result = json.loads(out.strip().splitlines()[-1])
    staged, sliding = result["staged"], result["sliding"]
    assert staged["finished"] == sliding["finished"] == "submitted"
    assert staged["max_context"] <= result["window"] and sliding["max_context"] <= result["window"]
    assert staged["prefix_breaks"] < sliding["prefix_breaks"]
    assert result["recompute_ratio"] > 2
