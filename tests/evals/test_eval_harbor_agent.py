"""Horizon inside Harbor's own trials: the real `harbor` CLI (PyPI, 0.26.0) runs
`evals.harbor_agent:HorizonInstalledAgent` on a local task whose image is built locally; the agent
is installed from a wheelhouse (no pip inside the task container) and its replayed run is graded
by Harbor's verifier. Slow: the first run builds a Debian trixie runner (Harbor needs Python >= 3.12)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sandbox import BASE_IMAGE
from tests.evals.harbor_images import harbor_task
from tests.evals.harbor_runner import harbor_run

ROOT = Path(__file__).resolve().parents[2]
pytestmark = [pytest.mark.docker, pytest.mark.slow]
# NOTE: Harbor keeps the task container alive with `sh -c "sleep infinity"` as PID 1, which ignores
# SIGTERM, so every `docker compose down` waited out Docker's 10 s stop timeout. The task's own image
# names SIGKILL as its stop signal; nothing in the trial depends on how the idle container is stopped.
STOP_AT_ONCE = "STOPSIGNAL SIGKILL\n"


def _call(name: str, **arguments) -> dict:
    return {"type": "function", "function": {"name": name, "arguments": json.dumps(arguments)}}


def _replay(path: Path, steps) -> Path:
    path.write_text("".join(json.dumps({"content": t, "tool_calls": c}) + "\n" for t, c in steps))
    return path


def test_harbor_runs_horizon_as_an_installed_agent(eval_docker, tmp_path):
    work = tmp_path / "harbor"
    harbor_task(work, "hello", toml='version = "1.0"\n[agent]\ntimeout_sec = 300\n[environment]\nmemory = "2G"\n',
                solve="#!/bin/bash\necho hello > /app/out.txt\n",
                test='#!/bin/bash\nif [ "$(cat /app/out.txt 2>/dev/null)" = hello ]; then echo 1; else echo 0; fi'
                     ' > /logs/verifier/reward.txt\n', dockerfile=f"FROM {BASE_IMAGE}\nWORKDIR /app\n{STOP_AT_ONCE}")
    solves = _replay(work / "solves.jsonl", [("Write it.", [_call("bash", command="echo hello > out.txt && pwd")]),
                                             ("Done.", [_call("finish", summary="wrote out.txt")])])
    idles = _replay(work / "idles.jsonl", [("Nothing to do.", [_call("finish", summary="did nothing")])])
    # NOTE: one Harbor job, two agents (the two replays) and two concurrent trials: one `harbor` start,
    # one wheelhouse build (shared by the trials), and the two trials overlap instead of running in turn.
    job = work / "job.json"
    job.write_text(json.dumps({"agents": [
        {"name": "evals.harbor_agent:HorizonInstalledAgent", "kwargs": {"model_spec": f"replay:{replay}"}}
        for replay in (solves, idles)]}))
    harbor_run(eval_docker, ROOT, work, ["run", "-c", str(job), "-p", str(work / "hello"), "-o", str(work / "jobs"),
                                         "-n", "2"])
    trials = {json.loads((p.parent / "config.json").read_text())["agent"]["kwargs"]["model_spec"]: p.parent
              for p in (work / "jobs").glob("*/*/result.json")}
    assert sorted(trials) == sorted(f"replay:{r}" for r in (solves, idles))
    rewards = {}
    for name, replay in (("solves", solves), ("idles", idles)):
        trial = trials[f"replay:{replay}"]
        result = json.loads((trial / "result.json").read_text())
        rewards[name] = result["verifier_result"]["rewards"]["reward"]
        agent = trial / "agent"
        outcome = json.loads((agent / "horizon-result.json").read_text())
        assert outcome["finish_reason"] == "submitted" and result["agent_result"]["n_input_tokens"] > 0
        events = [json.loads(line) for line in (agent / "horizon-trajectory.jsonl").read_text().splitlines()]
        assert events[0]["type"] == "run_start"
    assert rewards == {"solves": 1.0, "idles": 0.0}
    solved = trials[f"replay:{solves}"] / "agent" / "horizon-trajectory.jsonl"
    outputs = [json.loads(line) for line in solved.read_text().splitlines()]
    assert any(e["type"] == "tool_output" and "/app" in e["output"] for e in outputs)  # ran in the task's folder
