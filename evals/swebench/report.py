"""swebench's report files: per instance as run_instance writes them, per run as make_run_report does.

Each graded trial folder holds `report.json` (get_eval_report's output), `test_output.txt`,
`patch.diff` and `eval.sh`. At the end of a run they are laid out as swebench's log tree,
OUT/swebench/logs/run_evaluation/<run_id>/<model>/<instance_id>/, and swebench's make_run_report
writes OUT/swebench/<model>.<run_id>.json from it; `run_evaluation --rewrite_reports true` run
in OUT/swebench with the same run id re-grades those logs.
"""

from __future__ import annotations

import contextlib
import json
import shutil
import threading
from pathlib import Path

from swebench.harness.test_spec.test_spec import TestSpec

INSTANCE_FILES = ("report.json", "test_output.txt", "patch.diff", "eval.sh")
_cwd_lock = threading.Lock()


def write_instance_logs(trial_dir: Path, spec: TestSpec, prediction: dict, log: str, report: dict) -> None:
    (trial_dir / "patch.diff").write_text(prediction["model_patch"] or "", encoding="utf-8")
    (trial_dir / "eval.sh").write_text(spec.eval_script, encoding="utf-8")
    (trial_dir / "test_output.txt").write_text(log, encoding="utf-8")
    (trial_dir / "report.json").write_text(json.dumps(report, indent=4), encoding="utf-8")


def model_dir_name(model: str) -> str:
    return model.replace("/", "__")


def write_run_report(out: Path, run_id: str, predictions: dict[str, dict], trial_dirs: dict[str, Path]) -> Path:
    """Lay out swebench's log tree under OUT/swebench and let swebench's make_run_report summarize it."""
    from swebench.harness.reporting import make_run_report

    root = out / "swebench"
    for iid, pred in predictions.items():
        trial = trial_dirs.get(iid)
        dest = root / "logs" / "run_evaluation" / run_id / model_dir_name(pred["model_name_or_path"]) / iid
        if dest.exists():
            shutil.rmtree(dest)
        if trial is None or not (trial / "report.json").exists():
            continue  # not graded (an infrastructure error): make_run_report lists it under error_ids
        dest.mkdir(parents=True)
        for name in INSTANCE_FILES:
            if (trial / name).exists():
                shutil.copy2(trial / name, dest / name)
    dataset = [{"instance_id": iid} for iid in sorted(predictions)]
    with _cwd_lock, contextlib.chdir(root), contextlib.redirect_stdout(None):
        report = make_run_report(predictions, dataset, run_id, client=None)
    return root / report
