"""Terminal-Bench 1.x task folders: task.yaml, Dockerfile, docker-compose.yaml, run-tests.sh, tests/,
solution.sh or a keystroke solution.yaml (layout of the `terminal-bench` 0.2.x harness)."""

from __future__ import annotations

from pathlib import Path

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from evals.adapters.errors import TaskFileError, from_validation
from evals.task import (
    ImageSpec,
    KeystrokeSolution,
    KeystrokeStep,
    PytestSummaryVerifier,
    ScriptSolution,
    Task,
    Timeouts,
)


class TaskYaml(BaseModel):
    model_config = ConfigDict(extra="allow")  # authors, estimates, tags... are kept as metadata

    instruction: str = Field(min_length=1)
    parser_name: str = "pytest"
    max_agent_timeout_sec: float = Field(360.0, gt=0)
    max_test_timeout_sec: float = Field(60.0, gt=0)
    run_tests_in_same_shell: bool = False
    difficulty: str | None = None
    category: str = "software_engineering"


def is_tb1(folder: Path) -> bool:
    return (folder / "task.yaml").is_file()


def _read_yaml(path: Path):
    try:
        return yaml.safe_load(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}" if mark else None
        raise TaskFileError(path.name, where, f"invalid YAML: {exc}") from exc


def _compose_dockerfile(folder: Path) -> str:
    """Only the single `client` service of the template is supported; anything else is refused."""
    path = folder / "docker-compose.yaml"
    if not path.is_file():
        return "Dockerfile"
    doc = _read_yaml(path) or {}
    services = doc.get("services") if isinstance(doc, dict) else None
    if not isinstance(services, dict) or "client" not in services:
        raise TaskFileError(path.name, "services.client", "the compose file must define a `client` service")
    extra = sorted(set(services) - {"client"})
    if extra:
        raise TaskFileError(path.name, "services", f"extra services are not supported: {extra}")
    build = services["client"].get("build") or {}
    if isinstance(build, dict) and build.get("context", ".") not in (".", "./"):
        raise TaskFileError(path.name, "services.client.build.context", "only the task folder is supported")
    return build.get("dockerfile", "Dockerfile") if isinstance(build, dict) else "Dockerfile"


def _solution(folder: Path) -> ScriptSolution | KeystrokeSolution | None:
    script = folder / "solution.sh"
    if script.is_file():
        return ScriptSolution(source=script, container_dir="/oracle", entry="bash /oracle/solution.sh")
    keys = folder / "solution.yaml"
    if not keys.is_file():
        return None
    steps = _read_yaml(keys)
    if not isinstance(steps, list):
        raise TaskFileError(keys.name, None, "expected a list of keystroke steps")
    try:
        return KeystrokeSolution(steps=[KeystrokeStep(**s) for s in steps])
    except (ValidationError, TypeError) as exc:
        if isinstance(exc, ValidationError):
            raise from_validation(keys.name, exc) from exc
        raise TaskFileError(keys.name, None, f"each step must be a mapping: {exc}") from exc


def load_tb1(folder: Path, task_id: str) -> Task:
    raw = _read_yaml(folder / "task.yaml")
    if not isinstance(raw, dict):
        raise TaskFileError("task.yaml", None, "expected a mapping at the top level")
    try:
        spec = TaskYaml(**raw)
    except ValidationError as exc:
        raise from_validation("task.yaml", exc) from exc
    if spec.parser_name != "pytest":
        raise TaskFileError("task.yaml", "parser_name", f"unsupported parser {spec.parser_name!r} (expected 'pytest')")
    dockerfile = _compose_dockerfile(folder)
    if not (folder / dockerfile).is_file():
        raise TaskFileError(dockerfile, None, "the task's Dockerfile is missing")
    if not (folder / "run-tests.sh").is_file():
        raise TaskFileError("run-tests.sh", None, "missing: TB1 tasks are graded by run-tests.sh")
    tests = folder / "tests"
    return Task(
        id=task_id,
        format="tb1",
        source=folder,
        instruction=spec.instruction,
        environment=ImageSpec(context_dir=folder, dockerfile=dockerfile),
        env={"TEST_DIR": "/tests"},
        timeouts=Timeouts(agent_sec=spec.max_agent_timeout_sec, verifier_sec=spec.max_test_timeout_sec),
        verifier=PytestSummaryVerifier(run_tests=folder / "run-tests.sh", tests_dir=tests if tests.is_dir() else None),
        solution=_solution(folder),
        terminal=True,
        network=True,  # the TB1 harness's compose project has the default network: run-tests.sh fetches uv
        metadata={k: v for k, v in raw.items() if k != "instruction"},
    )
