"""What an eval agent is given for one trial, and what it reports back."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from evals.results import TokenUsage
from evals.task import Task
from evals.tmux import TmuxSession


@dataclass
class AgentContext:
    task: Task
    sandbox: Any  # sandbox.Sandbox of the task image
    terminal: TmuxSession | None  # Terminal-Bench tasks: the tmux session the harness opened
    deadline: float  # time.monotonic() by which the agent must stop
    log_dir: Path  # per-trial folder for trajectories and agent logs
    workdir: str

    def remaining(self) -> float:
        return max(0.0, self.deadline - time.monotonic())


@dataclass
class AgentOutcome:
    tokens: TokenUsage = field(default_factory=TokenUsage)
    finish_reason: str = "done"
    trajectory: str | None = None
    error: str | None = None  # the agent's own failure (never an infrastructure error)


class EvalAgent(Protocol):
    name: str

    def run(self, ctx: AgentContext) -> AgentOutcome: ...
