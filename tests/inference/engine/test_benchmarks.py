"""The engine benchmarks' --quick modes run and print their JSON lines."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

BENCH = Path(__file__).resolve().parents[3] / "benchmarks"
AGENT_KEYS = {"policy", "sessions", "prompt_tokens", "hit_tokens", "hit_rate", "device_hit_tokens",
              "host_hit_tokens", "recomputed_tokens", "capacity_tokens"}


def _load(name: str):
    spec = importlib.util.spec_from_file_location(f"bench_{name}", BENCH / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _json_lines(text: str) -> list[dict]:
    return [json.loads(line) for line in text.splitlines() if line.startswith("{")]


def test_agent_cache_quick(capsys):
    assert _load("agent_cache").main(["--quick"]) == 0
    lines = _json_lines(capsys.readouterr().out)
    policies = {line["policy"]: line for line in lines if "policy" in line}
    assert set(policies) == {"lru", "horizon"}
    for line in policies.values():
        assert AGENT_KEYS <= set(line)
        assert line["hit_tokens"] == line["device_hit_tokens"] + line["host_hit_tokens"]
        assert line["recomputed_tokens"] == line["prompt_tokens"] - line["hit_tokens"]
    ours, lru = policies["horizon"], policies["lru"]
    assert ours["prompt_tokens"] == lru["prompt_tokens"] and ours["capacity_tokens"] == lru["capacity_tokens"]
    assert lru["host_hit_tokens"] == 0 and ours["host_hit_tokens"] > 0
    assert ours["recomputed_tokens"] < lru["recomputed_tokens"]
    assert "comparison" in lines[-1]


def test_engine_throughput_quick(capsys):
    assert _load("engine_throughput").main(["--quick", "--threads", "1"]) == 0
    lines = _json_lines(capsys.readouterr().out)
    assert [line["batch"] for line in lines] == [1, 16]
    for line in lines:
        assert line["engine_tok_s"] > 0 and line["transformers_tok_s"] > 0 and line["ratio"] > 0
        assert line["matmul_floor_ms_per_step"]["engine"] > 0 and line["ceiling_decode_ratio"] > 0


def test_overlap_schedule_quick(capsys):
    assert _load("overlap_schedule").main(["--quick"]) == 0
    (line,) = _json_lines(capsys.readouterr().out)
    assert line["overlapped_steps"] > 0  # (the greedy tokens of both engines were asserted equal)
    assert line["serial_decode_tok_s"] > 0 and line["overlap_decode_tok_s"] > 0 and line["decode_ratio"] > 0
    for side in ("serial", "overlap"):
        step = line["per_step"][side]
        assert step["forward_ms"] > 0 and step["engine_thread_ms"] > 0 and step["step_ms"] > 0
        assert step["exposed_host_ms"] >= 0
