"""A --filter that selects nothing is a usage error, not an empty run that reports success."""

import subprocess
import sys
from pathlib import Path

import pytest

from evals.runner import RunOptions, run_eval

ROOT = Path(__file__).resolve().parents[2]
TASKS = ROOT / "evals" / "tasks"


def test_filter_matching_no_task_is_an_error(tmp_path):
    with pytest.raises(ValueError, match=r"matched none of the \d+ task ids"):
        run_eval(TASKS, RunOptions(agent="oracle", out_dir=tmp_path / "out", filters=["no-such-task*"], progress=False))
    assert not (tmp_path / "out" / "summary.json").exists()


@pytest.mark.parametrize("validate", [False, True])
def test_cli_reports_an_empty_filter_with_exit_code_2(tmp_path, validate):
    cmd = [sys.executable, "-m", "agent.cli.main", "eval", *(["validate"] if validate else []), str(TASKS),
           "--filter", "no-such-task*", "--out", str(tmp_path / "out"), "--quiet"]
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "--filter no-such-task* matched none" in proc.stderr
