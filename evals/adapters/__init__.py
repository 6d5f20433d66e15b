"""Find tasks under a path and load each with the adapter its files call for.

A path may be one task folder, a suite folder (searched a few levels down), or a SWE-bench JSON/JSONL
file. A task that cannot be loaded becomes a `TaskLoadError` naming file and field; it never stops
the others from loading.
"""

from __future__ import annotations

from pathlib import Path

from evals.adapters.cybergym import is_cybergym, load_cybergym
from evals.adapters.errors import TaskFileError, load_error
from evals.adapters.harbor import is_harbor, load_harbor
from evals.adapters.swe import is_swe_file, load_swe_file
from evals.adapters.tb1 import is_tb1, load_tb1
from evals.task import TaskLoadError, TaskOrError

MAX_DEPTH = 3
SKIP_DIRS = {"repos", "tests", "environment", "solution", "__pycache__"}


def detect_format(folder: Path) -> str | None:
    if is_harbor(folder):
        return "harbor"
    if is_tb1(folder):
        return "tb1"
    if is_cybergym(folder):
        return "cybergym"
    return None


def _load_folder(folder: Path, fmt: str, base_image: str) -> TaskOrError:
    task_id = folder.name
    try:
        if fmt == "harbor":
            return load_harbor(folder, task_id)
        if fmt == "tb1":
            return load_tb1(folder, task_id)
        return load_cybergym(folder, task_id, base_image)
    except TaskFileError as exc:
        return load_error(task_id, folder, exc)
    except (OSError, UnicodeDecodeError) as exc:
        return TaskLoadError(id=task_id, source=folder, file=folder.name, field=None, message=str(exc))


def _walk(path: Path, base_image: str, depth: int, swebench=None) -> list[TaskOrError]:
    if path.is_file():
        return load_swe_file(path, swebench) if is_swe_file(path) else []
    fmt = detect_format(path)
    if fmt is not None:
        return [_load_folder(path, fmt, base_image)]
    if depth >= MAX_DEPTH:
        return []
    found: list[TaskOrError] = []
    for child in sorted(path.iterdir()):
        if child.name.startswith(".") or child.name in SKIP_DIRS:
            continue
        if child.is_dir() or is_swe_file(child):
            found += _walk(child, base_image, depth + 1, swebench)
    return found


def load_tasks(path: Path, base_image: str, swebench=None) -> list[TaskOrError]:
    """Every task under `path`, in a stable order; duplicate ids are reported, not merged.
    `swebench`: the run's SwebenchConfig for SWE-bench instances (default: the official rules)."""
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"no such task path: {path}")
    tasks = _walk(path.resolve(), base_image, 0, swebench)
    seen: set[str] = set()
    out: list[TaskOrError] = []
    for task in tasks:
        if task.id in seen:
            out.append(TaskLoadError(id=task.id, source=task.source, file=task.source.name, field="id",
                                     message="duplicate task id in this suite"))
            continue
        seen.add(task.id)
        out.append(task)
    return out
