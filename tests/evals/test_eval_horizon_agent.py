"""The horizon agent (real loop, replay backend) solves sample tasks end to end through the runner."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from evals.results import ResultsLog
from evals.runner import RunOptions, run_eval

ROOT = Path(__file__).resolve().parents[2]
TASKS = ROOT / "evals" / "tasks"

pytestmark = [pytest.mark.docker]


def _call(name: str, **arguments) -> dict:
    return {"type": "function", "function": {"name": name, "arguments": json.dumps(arguments)}}


def _replay(path: Path, steps: list[tuple[str, list[dict]]]) -> Path:
    path.write_text("".join(json.dumps({"content": text, "tool_calls": calls}) + "\n" for text, calls in steps))
    return path


def test_horizon_answers_an_interactive_wizard_through_the_terminal(eval_docker, suite, tmp_path):
    root = suite("tb1-setup-wizard")
    replay = _replay(tmp_path / "wizard.jsonl", [
        ("The wizard needs a terminal; start it there.", [_call("terminal", text="python3 /app/wizard.py", wait_sec=1.0)]),
        ("Service name.", [_call("terminal", text="horizon", wait_sec=0.3)]),
        ("Port.", [_call("terminal", text="8042", wait_sec=0.3)]),
        ("Confirm.", [_call("terminal", text="y", wait_sec=1.0)]),
        ("Check the result.", [_call("bash", command="for i in $(seq 100); do [ -s /app/service.ini ] && break; sleep 0.1; done; cat /app/service.ini")]),
        ("Done.", [_call("finish", summary="ran the wizard with name horizon and port 8042")]),
    ])
    summary = run_eval(root, RunOptions(agent="horizon", model=f"replay:{replay}", out_dir=tmp_path / "out", progress=False))
    [r] = ResultsLog(tmp_path / "out" / "results.jsonl").load()
    assert r.status == "resolved", (r.error, r.details)
    assert r.tokens.input > 0 and r.tokens.cached > 0
    events = [json.loads(l) for l in Path(r.trajectory).read_text().splitlines()]
    outputs = [e["output"] for e in events if e["type"] == "tool_output"]
    assert all(o.startswith("[terminal screen]") for o in outputs[:4])
    assert "python3 /app/wizard.py" in outputs[0] and "configured_by = wizard" in outputs[4]
    assert events[-1]["type"] == "finish" and events[-1]["reason"] == "submitted"
    [system] = [e["message"]["content"] for e in events if e["type"] == "message" and e["message"]["role"] == "system"]
    assert "The repository is at /app." in system and "/workspace" not in system  # the task's workdir
    assert summary.cache_hit_rate is not None and 0 < summary.cache_hit_rate < 1


def test_horizon_fixes_a_swe_instance_from_the_cli(eval_docker, tmp_path):
    replay = _replay(tmp_path / "lru.jsonl", [
        ("Run the tests first.", [_call("bash", command="python3 -m pytest -q -p no:cacheprovider 2>&1 | tail -3")]),
        ("Make get() refresh recency.", [_call(
            "str_replace", path="lru.py", old_str="        return self._items.get(key, default)\n",
            new_str="        if key not in self._items:\n            return default\n"
                    "        self._items.move_to_end(key)\n        return self._items[key]\n")]),
        ("Done.", [_call("finish", summary="get() now marks the key as most recently used")]),
    ])
    out = tmp_path / "out"
    config = tmp_path / "eval.toml"
    config.write_text("[swebench]\noffline_substitute = true\n")
    proc = subprocess.run(
        [sys.executable, "-m", "agent.cli.main", "eval", str(TASKS / "swe" / "instances.jsonl"), "--agent", "horizon",
         "--model", f"replay:{replay}", "--filter", "*lru-1", "--out", str(out), "--quiet", "--config", str(config)],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    assert "resolved 1/1 trials (100.0%)" in proc.stdout
    [r] = ResultsLog(out / "results.jsonl").load()
    assert r.status == "resolved" and r.details["f2p"] == "1/1" and r.details["p2p"] == "2/2"
    [prediction] = [json.loads(l) for l in (out / "predictions.jsonl").read_text().splitlines()]
    assert prediction["model_name_or_path"] == "horizon" and "move_to_end(key)" in prediction["model_patch"]
    assert "__pycache__" not in prediction["model_patch"]


def test_horizon_in_evals_gets_the_agent_configs_plugins_in_the_tasks_workdir(eval_docker, tmp_path):
    """The [agent] table of the eval config enables plugins and disables built-ins as for `horizon run`;
    a plugin's relative paths resolve in the task's own working directory."""
    config = tmp_path / "eval.toml"
    config.write_text('[agent]\nplugins = ["line_count"]\ndisabled_tools = ["search"]\n[swebench]\noffline_substitute = true\n')
    replay = _replay(tmp_path / "plugin.jsonl", [
        ("Measure the module.", [_call("line_count", path="lru.py")]),
        ("Search is off here.", [_call("search", pattern="get")]),
        ("Make get() refresh recency.", [_call(
            "str_replace", path="lru.py", old_str="        return self._items.get(key, default)\n",
            new_str="        if key not in self._items:\n            return default\n"
                    "        self._items.move_to_end(key)\n        return self._items[key]\n")]),
        ("Done.", [_call("finish", summary="get() now marks the key as most recently used")]),
    ])
    out = tmp_path / "out"
    proc = subprocess.run(
        [sys.executable, "-m", "agent.cli.main", "eval", str(TASKS / "swe" / "instances.jsonl"), "--agent", "horizon",
         "--model", f"replay:{replay}", "--filter", "*lru-1", "--out", str(out), "--quiet", "--config", str(config)],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    [r] = ResultsLog(out / "results.jsonl").load()
    assert r.status == "resolved", (r.error, r.details)
    events = [json.loads(l) for l in Path(r.trajectory).read_text().splitlines()]
    outputs = [e["output"] for e in events if e["type"] == "tool_output"]
    assert outputs[0].endswith("chars") and " lines, " in outputs[0]
    assert "unknown tool 'search'" in outputs[1]
