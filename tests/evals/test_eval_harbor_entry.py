"""`python -m evals.harbor_entry` (what the Harbor agent runs in a task container): the real agent
loop works in the task's own folder, in place, and reports its token usage."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _call(name: str, **arguments) -> dict:
    return {"type": "function", "function": {"name": name, "arguments": json.dumps(arguments)}}


def test_entry_runs_the_agent_in_place_and_writes_its_result(tmp_path):
    app = tmp_path / "app"
    app.mkdir()
    (app / "given.txt").write_text("from the task\n")
    replay = tmp_path / "replay.jsonl"
    steps = [("Look and write.", [_call("bash", command="cat given.txt > out.txt && pwd")]),
             ("Done.", [_call("finish", summary="copied given.txt")])]
    replay.write_text("".join(json.dumps({"content": t, "tool_calls": c}) + "\n" for t, c in steps))
    (tmp_path / "instruction.md").write_text("Copy given.txt to out.txt.\n")
    result = tmp_path / "logs" / "result.json"
    result.parent.mkdir()
    proc = subprocess.run([sys.executable, "-m", "evals.harbor_entry", "--model", f"replay:{replay}",
                           "--instruction-file", str(tmp_path / "instruction.md"), "--workdir", str(app),
                           "--trajectory", str(tmp_path / "logs" / "trajectory.jsonl"), "--result", str(result)],
                          cwd=ROOT, capture_output=True, text=True, timeout=120, env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"})
    assert proc.returncode == 0, proc.stderr
    assert (app / "out.txt").read_text() == "from the task\n"  # the task's folder itself, not a copy
    outcome = json.loads(result.read_text())
    assert outcome["finish_reason"] == "submitted" and outcome["input_tokens"] > 0
    events = [json.loads(line) for line in (tmp_path / "logs" / "trajectory.jsonl").read_text().splitlines()]
    assert any(e["type"] == "tool_output" and str(app) in e["output"] for e in events)
