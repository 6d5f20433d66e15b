"""A real `horizon batch` process killed (SIGKILL) in the middle of a job, then `--resume`."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from agent.cli.main import main

from .helpers import FIX_STEPS, call, step, write_replay
from sandbox.docker_client import remove_container

pytestmark = [pytest.mark.docker, pytest.mark.slow]
RUN_LABEL_KEY = "dev.horizon.run"


def wait_for(predicate, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.2)


def test_resume_after_kill_skips_finished_jobs(tmp_path, docker_client, calc_repo_factory, capsys):
    replays = tmp_path / "replays"
    replays.mkdir()
    fix = write_replay(replays / "fix.jsonl", FIX_STEPS)
    slow_replay = replays / "slow.jsonl"
    write_replay(slow_replay, [step(call("bash", command="sleep 600", timeout=900))])
    jobs = [
        {"id": "first", "repo": str(calc_repo_factory("a")), "task": "fix add", "model": fix},
        {"id": "killed", "repo": str(calc_repo_factory("b")), "task": "fix add", "model": f"replay:{slow_replay}"},
        {"id": "third", "repo": str(calc_repo_factory("c")), "task": "fix add", "model": fix},
    ]
    jobs_file = tmp_path / "jobs.jsonl"
    jobs_file.write_text("".join(json.dumps(j) + "\n" for j in jobs))
    out = tmp_path / "out"
    horizon = Path(sys.executable).with_name("horizon")
    child_run_id = f"batch-kill-{uuid.uuid4().hex[:8]}"
    env = {**os.environ, "HORIZON_RUN_ID": child_run_id}
    proc = subprocess.Popen(
        [str(horizon), "batch", str(jobs_file), "--out", str(out), "-j", "1"],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
    )
    killed_trajectory = out / "jobs" / "killed" / "trajectory.jsonl"
    try:
        wait_for(lambda: (out / "results.jsonl").exists() and (out / "results.jsonl").read_text().strip(), 90,
                 "the first job's result")
        wait_for(lambda: killed_trajectory.exists() and "sleep 600" in killed_trajectory.read_text(), 60,
                 "the second job to start its long command")
        proc.send_signal(signal.SIGKILL)
        proc.wait(30)
    finally:
        if proc.poll() is None:
            proc.kill()
        # SIGKILL leaves the running job's container behind, as a real crash would; clear it.
        for container in docker_client.containers.list(sparse=True, all=True, filters={"label": f"{RUN_LABEL_KEY}={child_run_id}"}):
            remove_container(docker_client, container.id)
    assert [json.loads(l)["id"] for l in (out / "results.jsonl").read_text().splitlines()] == ["first"]

    # Without --resume an existing results file is refused rather than mixed into.
    assert main(["batch", str(jobs_file), "--out", str(out)]) == 2
    assert "already has results: pass --resume" in capsys.readouterr().err

    write_replay(slow_replay, FIX_STEPS)  # this time the job's model finishes quickly
    assert main(["batch", str(jobs_file), "--out", str(out), "-j", "2", "--resume"]) == 0
    err = capsys.readouterr().err
    assert "resume: skipping 1 finished jobs" in err and "start first" not in err
    ids = [json.loads(l)["id"] for l in (out / "results.jsonl").read_text().splitlines()]
    assert ids[0] == "first" and sorted(ids[1:]) == ["killed", "third"]
    assert "sleep 600" not in killed_trajectory.read_text()  # the rerun started from a fresh folder
    summary = json.loads((out / "summary.json").read_text())
    assert summary["by_status"]["fixed"] == 3 and summary["jobs"] == 3
