"""`horizon batch` end to end in real Docker sandboxes with scripted (replay) models: six small
repositories, three at a time, one job that fails, one that times out, branches for the fixes."""

from __future__ import annotations

import json

import pytest

from agent.cli.main import main
from .helpers import FIX_STEPS, call, step, write_replay

pytestmark = [pytest.mark.docker, pytest.mark.slow]


def test_six_repositories_three_at_a_time(tmp_path, docker_client, calc_repo_factory, git_cmd, capsys):
    replays = tmp_path / "replays"
    replays.mkdir()
    fix = write_replay(replays / "fix.jsonl", FIX_STEPS)
    jobs = [
        {"id": "fix-1", "repo": str(calc_repo_factory("r1")), "task": "add() is wrong", "test": "python3 test_calc.py", "model": fix},
        {"id": "fix-2", "repo": str(calc_repo_factory("r2")), "task": "add() is wrong", "test": "python3 test_calc.py",
         "model": write_replay(replays / "fix2.jsonl", [
             step(call("create", path="NOTES.md", file_text="fixed add\n"),
                  call("str_replace", path="calc.py", old_str="a - b", new_str="b + a")),
             step(call("finish", summary="done")),
         ])},
        {"id": "wrong-fix", "repo": str(calc_repo_factory("r3")), "task": "add() is wrong", "test": "python3 test_calc.py",
         "model": write_replay(replays / "wrong.jsonl", [
             step(call("str_replace", path="calc.py", old_str="a - b", new_str="a * b")),
             step(call("finish", summary="multiplying is close enough")),
         ])},
        # Its test run writes __pycache__ into the clone; that is not a change the agent made.
        {"id": "looks-only", "repo": str(calc_repo_factory("r4")), "task": "add() is wrong",
         "test": "python3 test_calc.py",
         "model": write_replay(replays / "look.jsonl", [
             step(call("view", path="calc.py")),
             step(call("finish", summary="I only looked")),
         ])},
        {"id": "setup-fails", "repo": str(calc_repo_factory("r5")), "task": "x", "setup": ["echo preparing", "python3 -c 'raise SystemExit(3)'"],
         "model": fix},
        {"id": "too-slow", "repo": str(calc_repo_factory("r6")), "task": "x", "limits": {"timeout_s": 4},
         "model": write_replay(replays / "slow.jsonl", [
             step(call("str_replace", path="calc.py", old_str="a - b", new_str="a + b")),
             step(call("bash", command="sleep 600", timeout=900)),
             step(call("finish", summary="never reached")),
         ])},
    ]
    jobs_file = tmp_path / "jobs.jsonl"
    lines = [json.dumps(j) for j in jobs]
    lines.insert(2, json.dumps({"id": "broken", "repo": str(tmp_path / "repos" / "r1"), "task": 5}))
    jobs_file.write_text("\n".join(lines) + "\n")
    out = tmp_path / "out"

    code = main(["batch", str(jobs_file), "--out", str(out), "-j", "3", "--branch-prefix", "horizon/"])

    assert code == 1  # an error job and an invalid line
    err = capsys.readouterr().err
    assert "invalid job: line 3: field 'task': Input should be a valid string (got 5)" in err
    assert "6 jobs: 2 fixed, 1 tests-failed, 1 no-change, 2 error; 1 invalid lines" in err
    assert "[6/6]" in err and "error too-slow: timed out after 4s" in err
    records = [json.loads(l) for l in (out / "results.jsonl").read_text().splitlines()]
    by_id = {r["id"]: r for r in records}
    assert len(records) == 6 and set(by_id) == {j["id"] for j in jobs}
    status = {k: (v["status"], v["reason"]) for k, v in by_id.items()}
    assert status["fix-1"] == ("fixed", None) and status["fix-2"] == ("fixed", None)
    assert status["wrong-fix"] == ("tests-failed", "test command exited with 1")
    assert status["looks-only"] == ("no-change", None)
    assert status["setup-fails"][0] == "error" and "exited with 3" in status["setup-fails"][1]
    assert status["too-slow"] == ("error", "timed out after 4s")

    # Per-job artifacts: patch, trajectory, test log, result.
    job_dir = out / "jobs" / "fix-1"
    assert "+    return a + b" in (job_dir / "patch.diff").read_text()
    assert "[exit 0]" in (job_dir / "test.log").read_text() and "ok" in (job_dir / "test.log").read_text()
    kinds = [json.loads(l)["type"] for l in (job_dir / "trajectory.jsonl").read_text().splitlines()]
    assert kinds[0] == "run_start" and kinds[-1] == "finish" and "tool_output" in kinds
    assert "AssertionError: 6" in (out / "jobs" / "wrong-fix" / "test.log").read_text()
    assert (out / "jobs" / "looks-only" / "patch.diff").read_text() == ""
    # The timed-out job still reports what it had changed before the limit.
    assert "+    return a + b" in (out / "jobs" / "too-slow" / "patch.diff").read_text()
    assert by_id["fix-1"]["prompt_tokens"] > 0 and by_id["fix-1"]["cached_tokens"] > 0

    # Fixes are committed to branches of the original repositories; the checkouts are untouched.
    r2 = tmp_path / "repos" / "r2"
    assert by_id["fix-2"]["branch"] == "horizon/fix-2"
    assert git_cmd(r2, "show", "horizon/fix-2:NOTES.md") == "fixed add"
    assert git_cmd(r2, "status", "--porcelain") == "" and "a - b" in (r2 / "calc.py").read_text()
    assert by_id["wrong-fix"]["branch"] is None

    summary = json.loads((out / "summary.json").read_text())
    assert summary["by_status"] == {"fixed": 2, "tests-failed": 1, "no-change": 1, "error": 2}
    assert summary["invalid_lines"] == 1 and 0 < summary["cache_hit_rate"] < 1
    assert json.loads((out / "invalid_jobs.json").read_text())[0]["line"] == 3
