"""`horizon run` end to end in real Docker with the replay backend: patch, trajectory, interrupt, resume."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from agent.cli.main import main
from agent.trajectory import load_trajectory, read_events
from agent_testkit import call, write_replay
from sandbox.docker_client import remove_container

HORIZON = str(Path(sys.executable).with_name("horizon"))


DEMO = Path(__file__).resolve().parents[2] / "examples" / "agent-demo"


def commit_all(repo: Path) -> None:
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run(["git", "init", "-q"], cwd=repo, check=True)
    subprocess.run(git + ["add", "-A"], cwd=repo, check=True)
    subprocess.run(git + ["commit", "-qm", "init"], cwd=repo, check=True)


def make_repo(root: Path) -> Path:
    repo = root / "repo"
    repo.mkdir()
    (repo / "calc.py").write_text("def add(a, b):\n    return a - b\n")
    (repo / "test_calc.py").write_text("from calc import add\n\n\ndef test_add():\n    assert add(2, 3) == 5\n")
    commit_all(repo)
    return repo


def host_pytest(repo: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"], cwd=repo,
                          capture_output=True, text=True, env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"})


FIX = call("str_replace", path="calc.py", old_str="return a - b", new_str="return a + b")


def test_replayed_agent_fixes_a_failing_test_and_the_patch_applies(tmp_path, docker_client, capsys):
    """The shipped demo (examples/agent-demo) as a git repository."""
    repo = tmp_path / "repo"
    shutil.copytree(DEMO / "repo", repo)
    commit_all(repo)
    patch, trajectory = tmp_path / "fix.patch", tmp_path / "run.jsonl"
    code = main(["run", "Make the tests pass", "--repo", str(repo), "--model", f"replay:{DEMO / 'fix-add.jsonl'}",
                 "--patch-out", str(patch), "--trajectory", str(trajectory)])
    out, err = capsys.readouterr()
    assert code == 0, err
    assert out.strip() == "add() subtracted its arguments; it now adds them, which also fixes mean()."
    assert host_pytest(repo).returncode == 1  # the original is untouched

    state = load_trajectory(trajectory)
    assert state.finish_reason == "submitted"
    observations = [m.content for m in state.messages if m.role == "tool"]
    assert "2 failed" in observations[0]
    assert observations[1].startswith("calc.py:4-5: function def add(a, b)")
    assert "calc.py:4: def add(a, b):" in observations[2] and "+    return a + b" in observations[3]
    assert "2 passed" in observations[4]
    assert "Keep fixes minimal" in state.messages[0].content  # AGENTS.md is in the system prompt

    text = patch.read_text()
    assert "-    return a - b" in text and "+    return a + b" in text and "__pycache__" not in text
    copy = tmp_path / "copy"
    shutil.copytree(repo, copy)
    subprocess.run(["git", "apply", str(patch)], cwd=copy, check=True)
    assert host_pytest(copy).returncode == 0


def test_json_mode_streams_parseable_events(tmp_path, docker_client, capsys):
    repo = make_repo(tmp_path)
    script = write_replay(tmp_path / "s.jsonl", [{"tool_calls": [call("finish", summary="nothing to do")]}])
    code = main(["run", "look around", "--repo", str(repo), "--model", f"replay:{script}", "--json",
                 "--trajectory", str(tmp_path / "t.jsonl")])
    lines = capsys.readouterr().out.splitlines()
    assert code == 0
    types = [json.loads(line)["type"] for line in lines]
    assert types[0] == "message" and types[-1] == "finish" and "usage" in types


def test_ctrl_c_interrupts_and_resume_finishes_the_run(tmp_path, docker_client, capsys):
    repo = make_repo(tmp_path)
    script = write_replay(tmp_path / "script.jsonl", [
        {"tool_calls": [FIX]},
        {"tool_calls": [call("bash", command="sleep 60", timeout=120)]},
        {"tool_calls": [call("bash", command="python3 -m pytest -q")]},
        {"tool_calls": [call("finish", summary="fixed after resume")]},
    ])
    trajectory = tmp_path / "run.jsonl"
    proc = subprocess.Popen([HORIZON, "run", "fix it", "--repo", str(repo), "--model", f"replay:{script}",
                             "--trajectory", str(trajectory)], stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 120
        while not (trajectory.exists() and "sleep 60" in trajectory.read_text()):
            assert proc.poll() is None and time.monotonic() < deadline, proc.stderr.read() if proc.poll() else "slow"
            time.sleep(0.2)
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=60) == 130, proc.stderr.read()
    finally:
        if proc.poll() is None:  # a second Ctrl-C aborts; the sandbox's exit hook removes the container
            proc.send_signal(signal.SIGINT)
            proc.wait(timeout=60)
    state = load_trajectory(trajectory)
    assert state.finish_reason == "interrupted" and state.usage.calls == 2
    assert "+    return a + b" in state.checkpoint_patch

    patch = tmp_path / "resumed.patch"
    assert main(["run", "--resume", str(trajectory), "--patch-out", str(patch)]) == 0, capsys.readouterr().err
    resumed = load_trajectory(trajectory)
    assert resumed.finish_reason == "submitted" and resumed.usage.calls == 4
    observations = [m.content for m in resumed.messages if m.role == "tool"]
    assert "interrupted by the user" in observations[1] and "1 passed" in observations[2]
    assert "+    return a + b" in patch.read_text()
    starts = [e for e in read_events(trajectory) if e.type == "run_start"]
    assert [s.resumed for s in starts] == [False, True]
    assert main(["run", "--resume", str(trajectory)]) == 2  # a finished run has nothing to continue


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--set", "max_steps=0"], "max_steps: got 0"),
        (["--set", "context.compact_trigger=2"], "context.compact_trigger: got 2"),
        (["--set", "colour=blue"], "colour: unknown setting"),
        (["--reasoning-effort", "extreme"], "reasoning_effort: got 'extreme'"),
    ],
)
def test_bad_settings_are_rejected_with_the_field_named(tmp_path, capsys, args, message):
    code = main(["run", "task", "--repo", str(tmp_path), "--model", "replay:x.jsonl", *args])
    assert code == 2 and message in capsys.readouterr().err


def test_config_file_errors_name_the_field(tmp_path, capsys):
    config = tmp_path / "horizon.toml"
    config.write_text('max_steps = 10\n[tools]\nbash_timeout_s = "soon"\n')
    assert main(["run", "task", "--repo", str(tmp_path), "--model", "replay:x", "--config", str(config)]) == 2
    assert "tools.bash_timeout_s: got 'soon'" in capsys.readouterr().err


def test_run_with_an_embedded_checkpoint_needs_no_engine_settings(tmp_path, tiny_checkpoint, capsys):
    """`--model embedded:CKPT` alone: the random model's one reply is unparseable, so the step limit ends it."""
    repo = make_repo(tmp_path)
    code = main(["run", "x", "--repo", str(repo), "--model", f"embedded:{tiny_checkpoint}", "--local",
                 "--max-steps", "1", "--set", "embedded.max_new_tokens=2", "--trajectory", str(tmp_path / "t.jsonl")])
    err = capsys.readouterr().err
    assert code == 3 and "finished: step_limit" in err, err


def test_run_reports_a_bad_engine_setting_in_one_line(tmp_path, tiny_checkpoint, capsys):
    code = main(["run", "x", "--repo", str(tmp_path), "--model", f"embedded:{tiny_checkpoint}", "--local",
                 "--set", "embedded.engine={page_size = 0}", "--trajectory", str(tmp_path / "t.jsonl")])
    err = capsys.readouterr().err
    assert code == 1 and "Traceback" not in err
    assert err.strip().splitlines() == [err.strip()] and "embedded.engine: page_size: got 0" in err


def test_json_events_and_a_patch_on_stdout_are_rejected_together(tmp_path, capsys):
    code = main(["run", "x", "--repo", str(tmp_path), "--model", "replay:x.jsonl", "--json", "--patch-out", "-"])
    out, err = capsys.readouterr()
    assert code == 2 and out == ""
    assert "--patch-out - cannot be combined with --json" in err


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGHUP])
def test_kill_stops_the_run_like_ctrl_c_and_removes_its_container(tmp_path, docker_client, signum):
    repo = make_repo(tmp_path)
    script = write_replay(tmp_path / "script.jsonl", [
        {"tool_calls": [call("bash", command="sleep 60", timeout=120)]},
        {"tool_calls": [call("finish", summary="never reached")]},
    ])
    trajectory = tmp_path / "run.jsonl"
    # Its own run id (a suffix of the session's, which labels every container) tells its container apart.
    run_id = f"{os.environ['HORIZON_RUN_ID']}-kill{int(signum)}"
    label = {"label": f"dev.horizon.run={run_id}"}
    proc = subprocess.Popen([HORIZON, "run", "wait", "--repo", str(repo), "--model", f"replay:{script}",
                             "--trajectory", str(trajectory)], stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "HORIZON_RUN_ID": run_id},
                            # A run under nohup keeps ignoring SIGHUP by design; the test must not
                            # depend on how the suite itself was started.
                            preexec_fn=lambda: signal.signal(signal.SIGHUP, signal.SIG_DFL))
    try:
        deadline = time.monotonic() + 120
        while not (trajectory.exists() and "sleep 60" in trajectory.read_text()):
            assert proc.poll() is None and time.monotonic() < deadline, proc.stderr.read() if proc.poll() else "slow"
            time.sleep(0.2)
        assert len(docker_client.containers.list(sparse=True, filters=label)) == 1  # the run's sandbox is up
        proc.send_signal(signum)
        assert proc.wait(timeout=60) == 130, proc.stderr.read()
        leaked = docker_client.containers.list(sparse=True, all=True, filters=label)
        assert leaked == [], [c.attrs.get("Names") for c in leaked]
        assert load_trajectory(trajectory).finish_reason == "interrupted"
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=60)
        for container in docker_client.containers.list(sparse=True, all=True, filters=label):
            remove_container(docker_client, container.id)
