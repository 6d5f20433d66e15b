"""One trial's result, and the append-only results.jsonl that makes runs resumable.

Each line is written and flushed (and fsynced) as the trial ends, so a crash or Ctrl-C loses at
most the trials still running; `--resume` reads the file back and skips what is already there.
"""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, Field

Status = Literal["resolved", "failed", "error"]

# Error classes. Infrastructure classes are retried and never count as the agent's failure.
INFRA_ERRORS = {"build_failed", "build_timeout", "image_unavailable", "sandbox_error", "verifier_crashed", "task_invalid",
                "internal_error", "agent_setup_failed", "gpu_unavailable", "verifier_environment", "compose_failed",
                "environment_error"}  # environment_error: SWE-bench's gold patch fails in the image too
# Only what a second try can fix. A missing image, a tool that cannot be installed, a missing GPU or
# a verifier that could not fetch its packages under the same network policy fail the same way again.
RETRYABLE = {"build_failed", "sandbox_error", "verifier_crashed"}


class TokenUsage(BaseModel):
    input: int = 0
    output: int = 0
    cached: int = 0

    def add(self, other: "TokenUsage") -> "TokenUsage":
        return TokenUsage(input=self.input + other.input, output=self.output + other.output,
                          cached=self.cached + other.cached)


class TrialResult(BaseModel):
    task_id: str
    format: str
    agent: str
    attempt: int = Field(ge=0)
    status: Status
    reward: float | None = None
    error_class: str | None = None  # infra class for status "error"; agent-side reason otherwise
    error: str | None = None
    agent_timed_out: bool = False
    engine: str | None = None  # which Docker engine ran it (config `[[engines]]` name)
    started_at: float
    finished_at: float
    phase_seconds: dict[str, float] = Field(default_factory=dict)
    tokens: TokenUsage = Field(default_factory=TokenUsage)
    retries: int = 0
    notes: list[str] = Field(default_factory=list)
    # How each image was obtained (evals/image_policy.py ImageResolution.record()); False when an
    # image was substituted, so this row's score is not comparable to a leaderboard's.
    images: list[dict] = Field(default_factory=list)
    comparable: bool = True
    details: dict = Field(default_factory=dict)
    trajectory: str | None = None

    @property
    def key(self) -> tuple[str, int]:
        return (self.task_id, self.attempt)

    @property
    def seconds(self) -> float:
        return self.finished_at - self.started_at


class ResultsLog:
    """Thread-safe append-only JSONL of `TrialResult`s."""

    def __init__(self, path: Path):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()

    def load(self) -> list[TrialResult]:
        """Every complete line; a torn last line (killed mid-write) is ignored."""
        if not self.path.exists():
            return []
        out = []
        for line in self.path.read_text(encoding="utf-8").splitlines():
            try:
                out.append(TrialResult.model_validate_json(line))
            except ValueError:
                continue
        return out

    def append(self, result: TrialResult) -> None:
        line = result.model_dump_json() + "\n"
        with self._lock, open(self.path, "a", encoding="utf-8") as f:
            f.write(line)
            f.flush()
            os.fsync(f.fileno())


def write_predictions(path: Path, records: list[dict]) -> None:
    """SWE-bench predictions.jsonl (instance_id, model_name_or_path, model_patch)."""
    with open(path, "w", encoding="utf-8") as f:
        for record in records:
            f.write(json.dumps(record) + "\n")
