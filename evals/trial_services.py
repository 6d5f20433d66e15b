"""Services a task's trial runs next to the agent's container (today: CyberGym's submission server).

`trial_services(task, ...)` gives an object with `prepare(timeout)` (the build phase: images the
services need; returns notes), `serving()` (a context manager around the agent's container that
yields the mounts the container gets) and whatever the task's grader reads from it. Tasks without
services get `NoServices`.
"""

from __future__ import annotations

import contextlib
from pathlib import Path

from evals.task import Task


class NoServices:
    def prepare(self, timeout: float | None = None) -> list[str]:
        return []

    @contextlib.contextmanager
    def serving(self):
        yield []


def trial_services(task: Task, engine, trial_dir: Path, labels: dict[str, str]):
    if task.verifier.kind == "cybergym":
        from evals.cybergym.service import CyberGymService

        return CyberGymService(task, engine, trial_dir, labels)
    return NoServices()
