"""The runner against a real engine: resume after a kill, build failures, malformed tasks, SWE
history stripping and patch application failures."""

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

from evals.config import EvalConfig
from evals.results import ResultsLog
from evals.runner import RunOptions, run_eval
from evals.swebench.config import SwebenchConfig
from sandbox.docker_client import remove_container

ROOT = Path(__file__).resolve().parents[2]
TASKS = ROOT / "evals" / "tasks"

pytestmark = [pytest.mark.docker]


def _remove_run_containers(client, run_id: str) -> None:
    for c in client.containers.list(sparse=True, all=True, filters={"label": f"dev.horizon.run={run_id}"}):
        remove_container(client, c.id)


def test_resume_after_kill_keeps_finished_and_skips_them(eval_docker, suite, tmp_path):
    root = suite("tb1-hello-file", "tb1-csv-summary", "harbor-fix-backup")
    out = tmp_path / "out"
    run_id = f"evals-resume-{uuid.uuid4().hex[:8]}"
    env = {**os.environ, "HORIZON_RUN_ID": run_id}
    cmd = [sys.executable, "-m", "agent.cli.main", "eval", str(root), "--agent", "oracle", "-j", "1", "--out", str(out), "--quiet"]
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env, start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    results = out / "results.jsonl"
    try:
        deadline = time.monotonic() + 240
        while not (results.exists() and results.read_text().count("\n") >= 1):
            assert proc.poll() is None, "the run ended before it could be killed"
            assert time.monotonic() < deadline, "no result appeared"
            time.sleep(0.2)
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        _remove_run_containers(eval_docker, run_id)
    before = results.read_text().splitlines()
    finished = [json.loads(l)["task_id"] for l in before]
    assert 1 <= len(finished) < 3

    summary = run_eval(root, RunOptions(agent="oracle", out_dir=out, resume=True, progress=False))
    after = results.read_text().splitlines()
    assert after[: len(before)] == before, "finished results are kept byte for byte"
    ids = [json.loads(l)["task_id"] for l in after]
    assert sorted(ids) == sorted(["tb1-hello-file", "tb1-csv-summary", "harbor-fix-backup"]), "nothing redone, nothing lost"
    assert summary.resolved_trials == 3

    with pytest.raises(Exception, match="--resume"):
        run_eval(root, RunOptions(agent="oracle", out_dir=out, progress=False))


def test_build_failure_is_an_infra_error_and_others_finish(eval_docker, suite, tmp_path):
    root = suite("tb1-hello-file", "tb1-csv-summary")
    (root / "tb1-csv-summary" / "Dockerfile").write_text("FROM horizon/base:bookworm\nRUN echo broken && exit 3\n")
    config = EvalConfig(max_infra_retries=1)
    summary = run_eval(root, RunOptions(agent="oracle", jobs=2, out_dir=tmp_path / "out", progress=False), config)
    by_id = {r.task_id: r for r in ResultsLog(tmp_path / "out" / "results.jsonl").load()}
    assert by_id["tb1-hello-file"].status == "resolved"
    broken = by_id["tb1-csv-summary"]
    assert (broken.status, broken.error_class, broken.retries) == ("error", "build_failed", 1)
    assert "exit 3" in broken.error or "returned a non-zero code" in broken.error
    assert summary.infra_errors == 1 and summary.resolved_rate == 1.0


def test_malformed_tasks_are_reported_and_the_run_goes_on(eval_docker, suite, tmp_path):
    root = suite("tb1-hello-file", "harbor-fix-backup", "harbor-recover-commit")
    (root / "harbor-fix-backup" / "task.toml").write_text("[verifier\ntimeout_sec = 3\n")
    toml = root / "harbor-recover-commit" / "task.toml"
    toml.write_text(toml.read_text().replace("[verifier]\n", '[verifier]\nenvironment_mode = "remote"\n'))
    proc = subprocess.run(
        [sys.executable, "-m", "agent.cli.main", "eval", str(root), "--agent", "oracle", "--out", str(tmp_path / "out"), "--quiet"],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    by_id = {r.task_id: r for r in ResultsLog(tmp_path / "out" / "results.jsonl").load()}
    assert by_id["tb1-hello-file"].status == "resolved"
    bad = by_id["harbor-fix-backup"]
    assert (bad.status, bad.error_class, bad.details["file"]) == ("error", "task_invalid", "task.toml")
    mode = by_id["harbor-recover-commit"]
    assert (mode.details["file"], mode.details["field"]) == ("task.toml", "verifier.environment_mode")
    assert "task_invalid=2" in proc.stdout


OFFLINE = EvalConfig(swebench=SwebenchConfig(offline_substitute=True))


def test_swe_agent_image_has_no_future_history(eval_docker, tmp_path):
    from evals.adapters import load_tasks
    from evals.swebench.images import ensure_task_image
    from sandbox import Sandbox, SandboxConfig

    [task] = [t for t in load_tasks(TASKS / "swe" / "instances.jsonl", "horizon/base:bookworm", OFFLINE.swebench)
              if t.id.endswith("lru-1")]
    tag, notes = ensure_task_image(task, eval_docker, timeout=1800)
    assert tag == "sweb.eval.x86_64.horizon-samples__lru-1:horizon-offline" and notes[0].startswith("not comparable")
    with Sandbox.start(SandboxConfig(image=tag, workdir="/testbed")) as sb:
        refs = sb.exec("git for-each-ref --format='%(refname)'; git rev-list --all | wc -l; git rev-parse HEAD^")
        lines = refs.output.split()
        assert lines[0] == "refs/heads/main" and len(lines) == 3, refs.output
        # the base commit, its parent and swebench's setup commit on top; the fix branch is gone
        assert lines[1] == "3" and lines[2] == task.verifier.instance["base_commit"]
        assert "move_to_end(key)\n        return" not in sb.read_file("/testbed/lru.py").decode()


def test_a_patch_that_does_not_apply_fails_with_its_reason(eval_docker, tmp_path, monkeypatch):
    from evals.swebench import grader

    bogus = "diff --git a/lru.py b/lru.py\n--- a/lru.py\n+++ b/lru.py\n@@ -1,3 +1,3 @@\n-this line is not there\n+nor this\n context\n"
    monkeypatch.setattr(grader, "extract_model_patch", lambda sb, repo, base, exclude=(): bogus)
    summary = run_eval(TASKS / "swe" / "instances.jsonl",
                       RunOptions(agent="nop", out_dir=tmp_path / "out", filters=["*lru-1"], progress=False), OFFLINE)
    [r] = ResultsLog(tmp_path / "out" / "results.jsonl").load()
    assert r.status == "failed" and r.details["apply_failed"] == 1
    assert r.error.startswith("patch does not apply")
    assert r.details["swebench_report"]["patch_successfully_applied"] is False
    assert summary.infra_errors == 0


def test_agent_timeout_is_enforced_and_the_trial_still_graded(eval_docker, suite, tmp_path):
    root = suite("tb1-hello-file")
    task_yaml = root / "tb1-hello-file" / "task.yaml"
    task_yaml.write_text(task_yaml.read_text().replace("max_agent_timeout_sec: 120", "max_agent_timeout_sec: 2"))
    (root / "tb1-hello-file" / "solution.sh").write_text("#!/bin/bash\nsleep 600\necho 'Hello, world!' > /app/hello.txt\n")
    run_eval(root, RunOptions(agent="oracle", out_dir=tmp_path / "out", progress=False))
    [r] = ResultsLog(tmp_path / "out" / "results.jsonl").load()
    assert r.agent_timed_out and r.status == "failed"
    assert r.details["tests"], "the tests ran after the agent timed out"


def test_trials_are_spread_over_the_configured_engines(eval_docker, suite, tmp_path):
    from evals.config import EngineConfig

    root = suite("tb1-hello-file", "tb1-csv-summary", "harbor-fix-backup", "harbor-recover-commit")
    # The second engine is named by its address, the way a remote engine would be.
    host = os.environ.get("DOCKER_HOST") or ("unix:///var/run/docker.sock" if Path("/var/run/docker.sock").exists() else None)
    config = EvalConfig(engines=[EngineConfig(name="engine-a"), EngineConfig(name="engine-b", docker_host=host)])
    summary = run_eval(root, RunOptions(agent="oracle", jobs=2, out_dir=tmp_path / "out", progress=False), config)
    results = ResultsLog(tmp_path / "out" / "results.jsonl").load()
    assert sorted(r.engine for r in results) == ["engine-a", "engine-a", "engine-b", "engine-b"]
    assert summary.resolved_trials == 4


def test_verifier_crash_is_retried_and_kept_apart_from_failures(eval_docker, suite, tmp_path):
    root = suite("harbor-fix-backup", "tb1-hello-file")
    (root / "harbor-fix-backup" / "tests" / "test.sh").write_text("#!/bin/bash\nmkdir -p /logs/verifier\necho -1 > /logs/verifier/reward.txt\n")
    summary = run_eval(root, RunOptions(agent="oracle", attempts=2, out_dir=tmp_path / "out", progress=False),
                       EvalConfig(max_infra_retries=1))
    results = ResultsLog(tmp_path / "out" / "results.jsonl").load()
    crashed = [r for r in results if r.task_id == "harbor-fix-backup"]
    assert [(r.status, r.error_class, r.retries) for r in crashed] == [("error", "verifier_crashed", 1)] * 2
    assert summary.error_classes == {"verifier_crashed": 2} and summary.infra_errors == 2
    assert summary.resolved_rate == 1.0, "infrastructure errors are not counted as the agent's failures"
    assert summary.pass_at_k == {"pass@1": 1.0, "pass@2": 1.0}, "pass@k is over graded trials"


def test_validate_flags_a_task_that_nop_solves(eval_docker, suite, tmp_path):
    root = suite("tb1-hello-file", "tb1-csv-summary")
    dockerfile = root / "tb1-hello-file" / "Dockerfile"
    dockerfile.write_text(dockerfile.read_text() + "RUN echo 'Hello, world!' > /app/hello.txt\n")
    proc = subprocess.run([sys.executable, "-m", "agent.cli.main", "eval", "validate", str(root), "-j", "2",
                           "--out", str(tmp_path / "v"), "--quiet"], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 1
    assert "INVALID tb1-hello-file: nop solved it" in proc.stdout
    assert "tb1-csv-summary" not in proc.stdout.split("INVALID", 1)[1]


def test_a_missing_prebuilt_image_is_an_infra_error(eval_docker, suite, tmp_path):
    root = suite("harbor-fix-backup")
    task = root / "harbor-fix-backup"
    (task / "environment" / "Dockerfile").unlink()
    toml = task / "task.toml"
    toml.write_text(toml.read_text().replace("[environment]\n", '[environment]\ndocker_image = "alexgshaw/fix-git:20260403"\n'))
    summary = run_eval(root, RunOptions(agent="oracle", out_dir=tmp_path / "out", progress=False))
    [r] = ResultsLog(tmp_path / "out" / "results.jsonl").load()
    assert (r.status, r.error_class, r.retries) == ("error", "image_unavailable", 0)
    assert "alexgshaw/fix-git:20260403" in r.error and summary.infra_errors == 1


class _Crasher:
    name = "crasher"

    def run(self, ctx):
        raise RuntimeError("model endpoint returned garbage")


def test_an_agent_crash_is_the_agents_failure_and_still_graded(eval_docker, suite, tmp_path):
    root = suite("tb1-hello-file")
    summary = run_eval(root, RunOptions(agent="crasher", out_dir=tmp_path / "out", progress=False), agent=_Crasher())
    [r] = ResultsLog(tmp_path / "out" / "results.jsonl").load()
    assert (r.status, r.error_class) == ("failed", "agent_error")
    assert "model endpoint returned garbage" in r.error and r.details["tests"]
    assert summary.infra_errors == 0 and summary.error_classes == {"agent:agent_error": 1}


def test_a_build_past_its_timeout_is_stopped_and_reported(eval_docker, suite, tmp_path):
    """build_timeout_sec really stops the build (no build container keeps sleeping) and the trial
    is an infrastructure error of its own class, not retried."""
    root = suite("harbor-fix-backup")
    task = root / "harbor-fix-backup"
    marker = f"horizon-build-timeout-{uuid.uuid4().hex[:8]}"
    dockerfile = task / "environment" / "Dockerfile"
    dockerfile.write_text(dockerfile.read_text() + f"RUN echo {marker} && sleep 120\n")
    (task / "task.toml").write_text((task / "task.toml").read_text().replace("build_timeout_sec = 300", "build_timeout_sec = 4"))
    started = time.monotonic()
    run_eval(root, RunOptions(agent="oracle", out_dir=tmp_path / "out", progress=False))
    elapsed = time.monotonic() - started
    [result] = [json.loads(l) for l in (tmp_path / "out" / "results.jsonl").read_text().splitlines()]
    assert (result["status"], result["error_class"], result["retries"]) == ("error", "build_timeout", 0)
    assert "did not finish within" in result["error"]
    assert elapsed < 60  # not the 120 s the build wanted
    running = [c for c in eval_docker.api.containers(all=True) if marker in (c.get("Command") or "")]
    assert running == [], running
