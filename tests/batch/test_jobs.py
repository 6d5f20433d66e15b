from __future__ import annotations

import json
from pathlib import Path

from agent.batch.jobs import load_jobs


def write_lines(path: Path, lines: list) -> Path:
    path.write_text("\n".join(x if isinstance(x, str) else json.dumps(x) for x in lines) + "\n")
    return path


def test_bad_lines_are_reported_with_line_and_field_and_the_rest_load(tmp_path, small_repo):
    (tmp_path / "issue.md").write_text("add() subtracts")
    jobs_file = write_lines(
        tmp_path / "jobs.jsonl",
        [
            {"id": "ok-1", "repo": "calc", "task": "fix add"},
            "{not json",
            {"id": "no-task", "repo": "calc"},
            {"id": "bad steps", "repo": "calc", "task": "x", "limits": {"max_steps": 0}},
            "",
            "# a comment line",
            {"id": "ok-2", "repo": str(small_repo), "issue_file": "issue.md", "setup": "true"},
            {"id": "ok-1", "repo": "calc", "task": "again"},
            {"id": "missing-repo", "repo": "nowhere", "task": "x"},
            {"id": "typo", "repo": "calc", "task": "x", "tset": "pytest"},
        ],
    )
    loaded = load_jobs(jobs_file)
    assert [j.id for j in loaded.jobs] == ["ok-1", "ok-2"]
    assert loaded.jobs[0].repo == str(small_repo.resolve())
    assert loaded.jobs[1].setup == ["true"]
    assert loaded.jobs[1].task_text(loaded.base_dir) == "add() subtracts"
    errors = {(e.line, e.field) for e in loaded.errors}
    assert errors == {
        (2, "(line)"),
        (3, "(job)"),
        (4, "id"),
        (4, "limits.max_steps"),
        (8, "id"),
        (9, "repo"),
        (10, "tset"),
    }
    by_line = {e.line: e for e in loaded.errors}
    assert "exactly one of 'task' or 'issue_file'" in by_line[3].message
    assert "duplicate id 'ok-1' (first on line 1)" in by_line[8].message
    assert "not a git repository" in by_line[9].message
    assert str(by_line[2]).startswith("line 2: field '(line)': not valid JSON")


def test_git_urls_are_not_checked_on_the_host(tmp_path):
    jobs_file = write_lines(tmp_path / "j.jsonl", [{"id": "remote", "repo": "https://example.org/x.git", "task": "t"}])
    loaded = load_jobs(jobs_file)
    assert loaded.errors == [] and not loaded.jobs[0].is_local


def test_a_base_ref_that_git_would_read_as_an_option_is_rejected(tmp_path, small_repo):
    jobs_file = write_lines(tmp_path / "j.jsonl", [
        {"id": "opt", "repo": str(small_repo), "base_ref": "--upload-pack=touch /tmp/x", "task": "t"},
        {"id": "pr", "repo": str(small_repo), "base_ref": "refs/pull/7/head", "task": "t"},
    ])
    loaded = load_jobs(jobs_file)
    assert [j.id for j in loaded.jobs] == ["pr"]
    [error] = loaded.errors
    assert (error.line, error.field) == (1, "base_ref") and "no leading '-'" in error.message


def test_cli_rejects_what_cannot_run(tmp_path, capsys):
    from agent.cli.main import main

    out = str(tmp_path / "out")
    assert main(["batch", str(tmp_path / "missing.jsonl"), "--out", out]) == 2
    assert "does not exist" in capsys.readouterr().err
    jobs = write_lines(tmp_path / "jobs.jsonl", [{"id": "a", "repo": "nowhere", "task": "x"}])
    assert main(["batch", str(jobs), "--out", out, "-j", "0"]) == 2
    assert "-j: expected a number >= 1, got 0" in capsys.readouterr().err
    assert main(["batch", str(jobs), "--out", out, "--model", "replay:x"]) == 2
    err = capsys.readouterr().err
    assert "invalid job: line 1: field 'repo'" in err and "no valid jobs" in err


def test_jobs_without_any_model_are_rejected_by_line(tmp_path, small_repo, capsys):
    from agent.cli.main import main

    jobs = write_lines(tmp_path / "jobs.jsonl", [{"id": "a", "repo": "calc", "task": "x"}])
    assert main(["batch", str(jobs), "--out", str(tmp_path / "out")]) == 2
    assert "line 1: field 'model': no model: give the job a 'model' or pass --model" in capsys.readouterr().err
