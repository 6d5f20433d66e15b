"""`embedded:` jobs of one batch load the model once and the batch stops the engine at its end."""

from __future__ import annotations

import json
import threading

from agent.batch.execute import JobSettings
from agent.batch.jobs import BatchJob
from agent.batch.runner import BatchRunner
from agent.config import AgentConfig
from sandbox import LocalSandbox

from .helpers import make_repo

ENGINE = {"dtype": "float32", "kv_budget_tokens": 4096, "page_size": 16}


def test_two_embedded_jobs_load_the_model_once(tmp_path, tiny_checkpoint):
    jobs = [BatchJob(id=f"job-{i}", repo=str(make_repo(tmp_path / f"r{i}", {"a.py": "x = 1\n"})), task="look")
            for i in range(2)]
    config = AgentConfig(max_steps=2, max_format_errors=5, embedded={"max_new_tokens": 4, "engine": ENGINE})
    settings = JobSettings(model=f"embedded:{tiny_checkpoint}", config=config, base_dir=tmp_path,
                           sandbox_factory=lambda workspace: LocalSandbox.start())
    engine_threads_before = {t for t in threading.enumerate() if t.name == "horizon-engine"}
    runner = BatchRunner(jobs, [], settings, tmp_path / "out", concurrency=2)

    summary = runner.run()

    records = [json.loads(line) for line in (tmp_path / "out" / "results.jsonl").read_text().splitlines()]
    assert sorted(r["id"] for r in records) == ["job-0", "job-1"] and summary.jobs == 2
    assert all(r["steps"] >= 1 and r["completion_tokens"] >= 1 for r in records), records  # the model answered
    assert runner.engines.stats() == {"loads": 1, "engines": 0}  # one load for both jobs, closed at the end
    assert {t for t in threading.enumerate() if t.name == "horizon-engine"} <= engine_threads_before
