"""`horizon eval validate` on every sample suite: the oracle solves 100%, nop 0%; -j 4 runs four at once."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from evals.config import EvalConfig
from evals.results import ResultsLog
from evals.swebench.config import SwebenchConfig
from evals.validate import validate_suite

ROOT = Path(__file__).resolve().parents[2]
TASKS = ROOT / "evals" / "tasks"

pytestmark = [pytest.mark.docker, pytest.mark.slow]


def _max_overlap(results) -> int:
    events = sorted([(r.started_at, 1) for r in results] + [(r.finished_at, -1) for r in results])
    running = peak = 0
    for _t, step in events:
        running += step
        peak = max(peak, running)
    return peak


def test_every_sample_suite_is_valid_and_runs_four_at_once(eval_docker, tmp_path):
    # SWE-bench images are built on the explicit offline substitute (no Docker Hub, no Miniconda here).
    config = EvalConfig(swebench=SwebenchConfig(offline_substitute=True))
    report = validate_suite(TASKS, tmp_path / "validate", jobs=4, config=config, progress=False)
    assert report.valid, report.render()
    formats = {r.format for r in report.oracle.values()}
    assert formats == {"tb1", "harbor", "swe", "cybergym"}
    assert len(report.oracle) == len(report.nop) == 17

    oracle = ResultsLog(tmp_path / "validate" / "oracle" / "results.jsonl").load()
    assert _max_overlap(oracle) == 4, "with -j 4 and 17 tasks, four trials run at the same time"

    nop = {r.task_id: r for r in report.nop.values()}
    assert nop["cg-tlv-stack"].error == "no PoC was submitted (bash submit.sh PATH_TO_POC)"
    assert nop["horizon-samples__roman-1"].details["f2p"] == "0/4"
    assert nop["horizon-samples__roman-1"].details["p2p"] == "2/2"
    deepswe = nop["deepswe-slugs"].details["metrics"]
    assert (deepswe["reward"], deepswe["f2p"], deepswe["p2p"]) == (0, 0.0, 1.0)
    assert report.oracle["deepswe-slugs"].details["metrics"]["f2p"] == 1.0
    cg = report.oracle["cg-rec-underflow"].details
    assert cg["vul_exit_code"] != 0 and cg["fix_exit_code"] == 0
    substituted = report.oracle["tb1-hello-file"].notes
    assert any("ghcr.io/laude-institute/t-bench/python-3-13" in n and "substituted" in n for n in substituted)

    predictions = [json.loads(l) for l in (tmp_path / "validate" / "oracle" / "predictions.jsonl").read_text().splitlines()]
    assert sorted(p["instance_id"] for p in predictions) == sorted(t for t in report.oracle if t.startswith("horizon-samples"))
    assert all(p["model_patch"].startswith("diff --git") and p["model_name_or_path"] == "oracle" for p in predictions)
    swe = json.loads((tmp_path / "validate" / "oracle" / "swebench" / "oracle.horizon-oracle.json").read_text())
    assert swe["resolved_instances"] == 5 and swe["schema_version"] == 2
    summary = json.loads((tmp_path / "validate" / "oracle" / "summary.json").read_text())
    assert summary["resolved_rate"] == 1.0 and summary["infra_errors"] == 0
