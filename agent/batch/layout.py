"""Where a batch writes things. One folder per job, plus the batch-wide log and summary:

    OUT/results.jsonl            one line per finished job (append + flush)
    OUT/summary.json             counts by status, tokens, cache-hit rate, time
    OUT/invalid_jobs.json        lines of the jobs file that were rejected, with line and field
    OUT/jobs/<id>/patch.diff     the job's changes against its base ref (may be empty)
    OUT/jobs/<id>/trajectory.jsonl  every agent event, flushed as it happens
    OUT/jobs/<id>/test.log       output of the job's test command, when it has one
    OUT/jobs/<id>/result.json    the same record as the job's line in results.jsonl
    OUT/jobs/<id>/workspace/     the job's checkout as the agent left it (--keep-workspaces)
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class JobPaths:
    root: Path

    @property
    def patch(self) -> Path:
        return self.root / "patch.diff"

    @property
    def trajectory(self) -> Path:
        return self.root / "trajectory.jsonl"

    @property
    def test_log(self) -> Path:
        return self.root / "test.log"

    @property
    def result(self) -> Path:
        return self.root / "result.json"

    @property
    def workspace(self) -> Path:
        return self.root / "workspace"

    def fresh(self) -> "JobPaths":
        """A job re-run after a kill starts from an empty folder, never from half-written files."""
        if self.root.exists():
            shutil.rmtree(self.root)
        self.root.mkdir(parents=True)
        return self


@dataclass(frozen=True)
class BatchLayout:
    root: Path

    @property
    def results(self) -> Path:
        return self.root / "results.jsonl"

    @property
    def summary(self) -> Path:
        return self.root / "summary.json"

    @property
    def invalid_jobs(self) -> Path:
        return self.root / "invalid_jobs.json"

    def job(self, job_id: str) -> JobPaths:
        return JobPaths(self.root / "jobs" / job_id)
