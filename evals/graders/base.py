"""What every grader gets and returns."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, ContextManager

from evals.task import Task


@dataclass
class Grade:
    resolved: bool
    reward: float
    details: dict = field(default_factory=dict)
    reason: str | None = None  # why it failed, when the agent's work is at fault


class VerifierCrashed(RuntimeError):
    """The verifier itself broke (no reward written, reward -1, test patch rejected...): an
    infrastructure error, never the agent's failure."""


@dataclass
class GradeContext:
    task: Task
    sandbox: Any  # the agent's sandbox, still running
    timeout: float  # the verifier phase's budget in seconds
    env_image: str  # tag of the task image the agent ran in
    builder: Any  # evals.images.ImageBuilder on this trial's engine
    open_sandbox: Callable[..., ContextManager]  # fresh no-network sandbox: open_sandbox(image, workdir=None, env=None)
    trial_dir: Path
    services: Any = None  # evals.trial_services: what ran next to the agent (CyberGym's submissions)


def grade_task(ctx: GradeContext) -> Grade:
    from evals.graders import poc, reward_file, tb1_pytest
    from evals.swebench import grader as swebench_grader

    graders = {
        "tb1-pytest": tb1_pytest.grade,
        "harbor-reward": reward_file.grade,
        "swebench": swebench_grader.grade,
        "cybergym": poc.grade,
    }
    return graders[ctx.task.verifier.kind](ctx)
