"""benchmarks/structured_outputs.py --quick runs and prints every section."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

BENCH = Path(__file__).resolve().parents[3] / "benchmarks" / "structured_outputs.py"


def test_structured_outputs_quick(capsys):
    spec = importlib.util.spec_from_file_location("bench_structured_outputs", BENCH)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert module.main(["--quick"]) == 0
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines() if line.startswith("{")]
    decode = [line for line in lines if line["section"] == "decode"]
    assert [line["batch"] for line in decode] == [1, 16]
    for line in decode:
        assert set(line["ms_per_token"]) == {"unconstrained", "json_schema", "tool_call_20"}
        assert all(v > 0 for v in line["ratio_vs_unconstrained"].values())
        assert all(0 < v <= 1 for v in line["constrained_frac"].values())
        assert all(v > 0 for v in line["mask_fill_ms_per_step"].values())
    (compile_line,) = [line for line in lines if line["section"] == "compile"]
    assert compile_line["tools"] == 20 and compile_line["compile_ms"] > compile_line["cached_ms"] > 0
    (mask,) = [line for line in lines if line["section"] == "mask"]
    assert mask["tokens"] > 0 and mask["xgrammar_us_per_token"] > 0 and mask["llguidance_us_per_token"] > 0
