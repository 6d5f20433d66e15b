"""benchmarks/parallel_overhead.py --quick runs end to end (a real follower process) and reports
the collectives of each step: one broadcast command, 2 all-reduces per layer + the embedding's,
one logits gather; with --dp-attention (split extras) one all-gather and one reduce-scatter per
layer, the embedding's and the head's exchanges (no count exchange: the command carries the counts)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]


def test_quick_run_reports_collective_counts():
    out = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "parallel_overhead.py"), "--quick", "--json"],
                         capture_output=True, text=True, timeout=300, check=True).stdout
    rows = {r["phase"]: r for r in json.loads(out)}
    layers = 4  # the tiny preset
    for phase in ("prefill", "decode_b1", "decode_b8"):
        calls = rows[phase]["collectives_per_step"]
        assert calls["all_reduce"] == 2 * layers + 1 and calls["gather"] == 1 and calls["broadcast_object"] == 1
        # Times are reported, not asserted: a decode step's time is a difference of two runs, which
        # noise on a loaded machine can even make negative (no timing thresholds in tests).
        assert {"tp1_s", "tp2_s", "tp2_over_tp1", "glm53_bytes_per_step"} <= rows[phase].keys()
    # bytes all-reduced per decode step scale with the batch
    assert rows["decode_b8"]["bytes_per_step"]["all_reduce"] == 8 * rows["decode_b1"]["bytes_per_step"]["all_reduce"]


def test_quick_dp_attention_run_reports_the_exchanges():
    """Split extras (the default): per forward one all-gather and one reduce-scatter per layer,
    dense or MoE, plus the embedding's reduce-scatter, the head's all-gather and its gather."""
    out = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "parallel_overhead.py"), "--quick", "--json",
                          "--dp-attention"], capture_output=True, text=True, timeout=300, check=True).stdout
    rows = {r["phase"]: r for r in json.loads(out)}
    layers = 4  # the tiny preset: 4 layers, the first dense
    for phase in ("prefill", "decode_b1", "decode_b8"):
        calls = rows[phase]["collectives_per_step"]
        assert calls == {"broadcast_object": 1, "all_gather": layers + 1, "reduce_scatter": layers + 1, "gather": 1}
        assert {"tp1_s", "dp2_s", "dp2_over_tp1", "glm53_bytes_per_step"} <= rows[phase].keys()
        assert rows[phase]["dp_extras"] == "split"
    # decode at batch 8 puts 4 requests on each rank: each exchange carries 4 rows per rank, not 1
    per_row = rows["decode_b1"]["bytes_per_step"]["all_gather"]
    assert rows["decode_b8"]["bytes_per_step"]["all_gather"] == 4 * per_row


def test_glm53_dp_bytes_count_the_split_extras_exchanges():
    """At GLM-5.3's shape the split extras add the embedding's and the dense layers' exchanges and
    the head's row gather, and gather vocab slices instead of whole logit rows."""
    sys.path.insert(0, str(ROOT))
    from benchmarks.parallel_overhead import REAL, real_dp_bytes_per_step

    h, v = REAL["hidden"], REAL["vocab"]
    replicated = real_dp_bytes_per_step(1, 1, ranks=8, split_extras=False)
    assert replicated == 75 * (h * 2 + 8 * h * 4) + v * 2  # fp32 partials reduce-scattered
    split = real_dp_bytes_per_step(1, 1, ranks=8)
    assert split - replicated == 8 * h * 2 + 3 * (h * 2 + 8 * h * 4) + h * 2 + (8 * (-(-v // 8)) - v) * 2
    assert real_dp_bytes_per_step(1, 1, ranks=8, reduce_fp32=False) < split
