"""Adapters: the sample suites load, and malformed tasks are reported with file and field."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from evals.adapters import load_tasks
from evals.task import Task, TaskLoadError

ROOT = Path(__file__).resolve().parents[2]
TASKS = ROOT / "evals" / "tasks"
BASE = "horizon/base:bookworm"


def _by_id(items):
    return {t.id: t for t in items}


def test_sample_suites_load_with_the_expected_formats():
    items = load_tasks(TASKS, BASE)
    errors = [str(t) for t in items if isinstance(t, TaskLoadError)]
    assert not errors
    formats = [t.format for t in items]
    assert formats.count("tb1") + formats.count("harbor") >= 6
    assert formats.count("tb1") >= 2 and formats.count("harbor") >= 2
    assert formats.count("swe") == 5 and formats.count("cybergym") == 5
    assert all(t.solution is not None for t in items), "every sample task has an oracle solution"
    levels = sorted(t.metadata["level"] for t in items if t.format == "cybergym")
    assert set(levels) == {0, 1, 2, 3}


def test_tb1_fields_and_keystroke_solution():
    tasks = _by_id(load_tasks(TASKS / "terminal-bench", BASE))
    wizard = tasks["tb1-setup-wizard"]
    assert wizard.terminal and wizard.env["TEST_DIR"] == "/tests"
    assert wizard.solution.kind == "keystrokes" and wizard.solution.steps[0].command == "python3 /app/wizard.py"
    assert wizard.timeouts.agent_sec == 180 and wizard.timeouts.verifier_sec == 60
    hello = tasks["tb1-hello-file"]
    assert hello.solution.kind == "script" and hello.verifier.kind == "tb1-pytest"


def test_harbor_separate_verifier_fields():
    task = _by_id(load_tasks(TASKS / "terminal-bench", BASE))["harbor-prime-count"]
    v = task.verifier
    assert v.environment_mode == "separate" and v.verifier_image is not None
    assert v.collect[0].command.startswith("mkdir -p /logs/artifacts")
    assert v.artifacts == ["/logs/artifacts/answer.txt"]
    assert task.network is False


def test_swe_instance_fields():
    task = _by_id(load_tasks(TASKS / "swe" / "instances.jsonl", BASE))["horizon-samples__roman-1"]
    v = task.verifier
    assert v.kind == "swebench" and len(v.instance["FAIL_TO_PASS"]) == 4
    assert "tests/test_roman.py::test_simple" in v.instance["PASS_TO_PASS"]
    assert v.source.endswith("repos/horizon-samples__roman.bundle") and v.config.pull == "missing"
    assert task.workdir == "/testbed" and task.env["PATH"].startswith("/opt/miniconda3/envs/testbed/bin:")
    assert task.solution.patch.startswith("diff --git")


def test_cybergym_levels_decide_what_the_agent_gets():
    tasks = [t for t in load_tasks(TASKS / "cybergym", BASE)]
    for t in tasks:
        given = set(t.environment.copy_files)
        level = t.metadata["level"]
        assert ("task/description.txt" in given) == (level >= 1)
        assert ("task/error.txt" in given) == (level >= 2)
        assert ("task/patch.diff" in given) == ("task/repo-fix.tar.gz" in given) == (level == 3)
        assert not any(name.endswith("poc") for name in given), "the reference PoC never reaches the agent"
        assert "--unix-socket /run/cybergym/submit.sock" in t.environment.generated_files["task/submit.sh"]


def _copy_task(tmp_path: Path, name: str) -> Path:
    dest = tmp_path / name
    shutil.copytree(TASKS / "terminal-bench" / name, dest)
    return dest


def test_malformed_tasks_are_reported_per_task(tmp_path):
    no_instruction = _copy_task(tmp_path, "tb1-hello-file")
    text = (no_instruction / "task.yaml").read_text()
    (no_instruction / "task.yaml").write_text("\n".join(l for l in text.splitlines() if not l.startswith(("instruction", "  Create"))))
    bad_toml = _copy_task(tmp_path, "harbor-fix-backup")
    (bad_toml / "task.toml").write_text("[agent]\ntimeout_sec = = 3\n")
    bad_mode = _copy_task(tmp_path, "harbor-recover-commit")
    with open(bad_mode / "task.toml", "a") as f:
        f.write("")
    (bad_mode / "task.toml").write_text((bad_mode / "task.toml").read_text().replace("[verifier]\n", "[verifier]\nenvironment_mode = \"sideways\"\n"))
    no_md = _copy_task(tmp_path, "harbor-prime-count")
    (no_md / "instruction.md").unlink()
    good = _copy_task(tmp_path, "tb1-csv-summary")

    items = _by_id(load_tasks(tmp_path, BASE))
    assert isinstance(items[good.name], Task)
    e = items[no_instruction.name]
    assert isinstance(e, TaskLoadError) and (e.file, e.field) == ("task.yaml", "instruction")
    e = items[bad_toml.name]
    assert isinstance(e, TaskLoadError) and e.file == "task.toml" and "invalid TOML" in e.message
    e = items[bad_mode.name]
    assert isinstance(e, TaskLoadError) and (e.file, e.field) == ("task.toml", "verifier.environment_mode")
    assert "sideways" in e.message
    e = items[no_md.name]
    assert isinstance(e, TaskLoadError) and e.file == "instruction.md"


def test_swe_bad_records_do_not_hide_good_ones(tmp_path):
    lines = (TASKS / "swe" / "instances.jsonl").read_text().splitlines()
    broken = json.loads(lines[1])
    del broken["problem_statement"]
    content = [lines[0], json.dumps(broken), "{not json", lines[2]]
    path = tmp_path / "instances.jsonl"
    path.write_text("\n".join(content) + "\n")
    shutil.copytree(TASKS / "swe" / "repos", tmp_path / "repos")
    items = load_tasks(path, BASE)
    assert [type(t).__name__ for t in items] == ["Task", "TaskLoadError", "TaskLoadError", "Task"]
    assert (items[1].file, items[1].field) == ("instances.jsonl:2", "problem_statement")
    assert items[2].file == "instances.jsonl:3" and "invalid JSON" in items[2].message


def test_a_cybergym_folder_with_a_foreign_file_set_names_the_file(tmp_path):
    dest = tmp_path / "cg"
    shutil.copytree(TASKS / "cybergym", dest)
    shutil.copy(dest / "data" / "local" / "cg-tlv-stack" / "patch.diff", dest / "cg-tlv-stack" / "patch.diff")
    err = _by_id(load_tasks(dest, BASE))["cg-tlv-stack"]
    assert isinstance(err, TaskLoadError) and (err.file, err.field) == ("patch.diff", "level")


def test_missing_path_raises():
    with pytest.raises(FileNotFoundError):
        load_tasks(Path("/nonexistent/suite"), BASE)
