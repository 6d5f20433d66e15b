"""Per-job results, the status classification, and the append-only `results.jsonl` log.

`results.jsonl` is the batch's source of truth: one line per finished job, flushed and fsynced as the
job ends, so a killed batch loses at most the jobs that were still running, and `--resume` skips
every id found here.
"""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ValidationError

JobStatus = Literal["fixed", "tests-failed", "no-change", "error"]


class JobResult(BaseModel):
    id: str
    status: JobStatus
    reason: str | None = None
    patch_lines: int = 0
    test_exit_code: int | None = None
    steps: int = 0
    prompt_tokens: int = 0
    cached_tokens: int = 0
    completion_tokens: int = 0
    duration_s: float = 0.0
    base_commit: str | None = None
    branch: str | None = None
    finish_reason: str | None = None  # why the agent stopped: submitted, step_limit, token_budget, ...
    finish_summary: str | None = None
    workspace: str | None = None  # the kept checkout (--keep-workspaces)
    warnings: list[str] = []  # problems that do not change the verdict (e.g. file ownership not returned)


def classify(patch: str, test_exit_code: int | None, error: str | None) -> tuple[JobStatus, str | None]:
    """An error wins; then an empty patch is no-change; then the test decides (no test: a patch is a fix)."""
    if error:
        return "error", error
    if not patch.strip():
        return "no-change", None
    if test_exit_code is None or test_exit_code == 0:
        return "fixed", None
    return "tests-failed", f"test command exited with {test_exit_code}"


class ResultsLog:
    """Thread-safe appender; tolerates the torn last line a killed process can leave behind."""

    def __init__(self, path: Path):
        self.path = Path(path)
        self._lock = threading.Lock()
        self.path.parent.mkdir(parents=True, exist_ok=True)
        if self.path.exists() and self.path.stat().st_size:
            with self.path.open("rb") as f:
                f.seek(-1, os.SEEK_END)
                torn = f.read(1) != b"\n"
            if torn:  # finish the torn line so the next record starts on its own line
                with self.path.open("a", encoding="utf-8") as f:
                    f.write("\n")

    def append(self, result: JobResult) -> None:
        line = result.model_dump_json() + "\n"
        with self._lock, self.path.open("a", encoding="utf-8") as f:
            f.write(line)
            f.flush()
            os.fsync(f.fileno())

    def read(self) -> list[JobResult]:
        """Valid records, last one per id winning; unparsable lines (a torn write) are skipped."""
        if not self.path.exists():
            return []
        by_id: dict[str, JobResult] = {}
        for raw in self.path.read_text(encoding="utf-8").splitlines():
            try:
                result = JobResult.model_validate(json.loads(raw))
            except (json.JSONDecodeError, ValidationError):
                continue
            by_id[result.id] = result
        return list(by_id.values())

    def finished_ids(self) -> set[str]:
        return {r.id for r in self.read()}
