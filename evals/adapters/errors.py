"""Turn parse and validation failures into `TaskLoadError`s that name the file and the field."""

from __future__ import annotations

from pathlib import Path

from pydantic import ValidationError

from evals.task import TaskLoadError


class TaskFileError(Exception):
    """Raised inside adapters; the loader turns it into a per-task `TaskLoadError`."""

    def __init__(self, file: str, field: str | None, message: str):
        super().__init__(f"{file} [{field}]: {message}")
        self.file, self.field, self.message = file, field, message


def from_validation(file: str, exc: ValidationError, prefix: str = "") -> TaskFileError:
    first = exc.errors()[0]
    field = ".".join(str(p) for p in first["loc"])
    field = f"{prefix}{field}" if field else prefix.rstrip(".") or None
    got = first.get("input")
    detail = first["msg"] + ("" if first["type"] == "missing" else f" (got {got!r})")
    return TaskFileError(file, field, detail)


def load_error(task_id: str, source: Path, exc: TaskFileError) -> TaskLoadError:
    return TaskLoadError(id=task_id, source=source, file=exc.file, field=exc.field, message=exc.message)
