"""After Ctrl-C the runner starts no new containers: a failed trial is not retried (the exiting
process could not remove a container started then)."""

import json
import signal
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import pytest

from evals.adapters import load_tasks
from evals.config import EvalConfig
from evals.runner import RunOptions, _run_with_retries, make_agent, make_engines

ROOT = Path(__file__).resolve().parents[2]
pytestmark = [pytest.mark.docker]


@pytest.mark.parametrize("interrupted", [False, True])
def test_infra_errors_are_retried_only_while_not_interrupted(eval_docker, suite, tmp_path, interrupted):
    root = suite("tb1-hello-file")
    (root / "tb1-hello-file" / "Dockerfile").write_text("FROM horizon/base:bookworm\nRUN exit 3\n")
    config = EvalConfig(max_infra_retries=2)
    options = RunOptions(agent="oracle", out_dir=tmp_path / "out", progress=False)
    [task] = load_tasks(root, config.base_image)
    stopping = threading.Event()
    if interrupted:
        stopping.set()
    result = _run_with_retries(task, make_agent(options, config), make_engines(config)[0], tmp_path / "out", 0,
                               options, config.max_infra_retries, "qa-interrupt", stopping)
    assert (result.status, result.error_class) == ("error", "build_failed")
    assert result.retries == (0 if interrupted else 2)


def test_sigterm_stops_the_run_and_removes_its_containers(eval_docker, suite, tmp_path):
    task_id = f"sigterm-{uuid.uuid4().hex[:8]}"
    root = suite("tb1-hello-file")
    (root / "tb1-hello-file").rename(root / task_id)
    replay = tmp_path / "sleep.jsonl"
    replay.write_text(json.dumps({"tool_calls": [{"id": "s", "type": "function", "function": {
        "name": "bash", "arguments": json.dumps({"command": "sleep 600"})}}]}) + "\n")
    ours = {"label": f"dev.horizon.eval.task={task_id}"}
    proc = subprocess.Popen([sys.executable, "-m", "agent.cli.main", "eval", str(root), "--agent", "horizon",
                             "--model", f"replay:{replay}", "--out", str(tmp_path / "out"), "--quiet"],
                            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 120
        while not eval_docker.containers.list(sparse=True, filters=ours) and time.monotonic() < deadline:
            time.sleep(0.5)
        assert eval_docker.containers.list(sparse=True, filters=ours), "the trial's sandbox never started"
        proc.send_signal(signal.SIGTERM)  # first: finish running trials; second: abort
        time.sleep(1)
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == 130, err
    assert not eval_docker.containers.list(sparse=True, all=True, filters=ours)
    assert not (tmp_path / "out" / "results.jsonl").exists() or not (tmp_path / "out" / "results.jsonl").read_text()
