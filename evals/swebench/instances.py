"""SWE-bench instances from JSON, JSONL or parquet files, as tasks for the runner.

Each record is a SWE-bench row (instance_id, repo, version, base_commit, problem_statement, patch,
test_patch, FAIL_TO_PASS, PASS_TO_PASS, ...). The repository comes from, first found: `repo_url`,
`repo_bundle` or `repo_path` (relative to the file), `repos/<owner>__<name>.bundle` or
`repos/<owner>__<name>/` next to the file, else `https://github.com/<repo>` (cloned by the build).
Records of repositories swebench has no specs for may carry `specs` (see specs.py).
"""

from __future__ import annotations

import json
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from evals.adapters.errors import TaskFileError, from_validation
from evals.swebench.config import SwebenchConfig
from evals.swebench.specs import SpecError, check_known, register_specs
from evals.task import ImageSpec, PatchSolution, SwebenchVerifier, Task, TaskLoadError, TaskOrError, Timeouts

REPO_DIR = "/testbed"
SUFFIXES = (".json", ".jsonl", ".parquet")
# swebench images keep their environment at the Miniconda path; the stand-in uses the same one.
PATH = "/opt/miniconda3/envs/testbed/bin:/opt/miniconda3/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
# The fields swebench's make_test_spec and grading read; the rest of a record stays out of the verifier.
SWEBENCH_FIELDS = ("instance_id", "repo", "version", "base_commit", "environment_setup_commit", "patch",
                   "test_patch", "FAIL_TO_PASS", "PASS_TO_PASS", "problem_statement", "hints_text", "created_at")

INSTRUCTION = """{problem}

The repository is checked out at {repo_dir} (git). There is no network access. Change the source so
the problem is solved; your work is graded from its `git diff` by the project's tests (SWE-bench rules)."""


class SweInstance(BaseModel):
    model_config = ConfigDict(extra="allow")

    instance_id: str = Field(min_length=1)
    repo: str = Field(pattern=r"^[^/\s]+/[^/\s]+$")
    version: str | None = None
    base_commit: str = Field(pattern=r"^[0-9a-f]{7,40}$")
    problem_statement: str = Field(min_length=1)
    patch: str = ""
    test_patch: str = Field(min_length=1)
    FAIL_TO_PASS: list[str]
    PASS_TO_PASS: list[str] = Field(default_factory=list)
    repo_url: str | None = None
    repo_path: str | None = None
    repo_bundle: str | None = None
    specs: dict | None = None
    agent_timeout_sec: float = Field(1800.0, gt=0)
    verifier_timeout_sec: float = Field(1800.0, gt=0)  # run_evaluation's default --timeout

    @field_validator("FAIL_TO_PASS", "PASS_TO_PASS", mode="before")
    @classmethod
    def _json_list(cls, value):
        return json.loads(value) if isinstance(value, str) else value  # SWE-bench stores them JSON-encoded

    @field_validator("version", mode="before")
    @classmethod
    def _version_text(cls, value):
        return None if value is None else str(value)  # parquet/JSON may hold 3.0 as a number


def is_swe_file(path: Path) -> bool:
    return path.is_file() and path.suffix in SUFFIXES


def read_records(path: Path) -> list[tuple[int, object]]:
    if path.suffix == ".parquet":
        import pyarrow.parquet as pq

        try:
            rows = pq.read_table(path).to_pylist()
        except Exception as exc:
            raise TaskFileError(path.name, None, f"unreadable parquet: {exc}") from exc
        return list(enumerate(rows, 1))
    text = path.read_text(encoding="utf-8")
    if path.suffix == ".json":
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise TaskFileError(path.name, f"line {exc.lineno}", f"invalid JSON: {exc.msg}") from exc
        return list(enumerate(data if isinstance(data, list) else [data], 1))
    records: list[tuple[int, object]] = []
    for lineno, line in enumerate(text.splitlines(), 1):
        if line.strip():
            try:
                records.append((lineno, json.loads(line)))
            except json.JSONDecodeError as exc:
                records.append((lineno, exc))
    return records


def repo_location(inst: SweInstance, base: Path) -> str:
    if inst.repo_url:
        return inst.repo_url
    slug = inst.repo.replace("/", "__")
    named = [base / p for p in (inst.repo_bundle, inst.repo_path) if p]
    for path in named or [base / "repos" / f"{slug}.bundle", base / "repos" / slug]:
        if path.exists():
            return str(path.resolve())
    if named:  # a source the record names must exist: no silent fallback to another copy
        raise TaskFileError("instances", "repo_bundle" if inst.repo_bundle else "repo_path",
                            f"no repository at {[str(p) for p in named]}")
    return f"https://github.com/{inst.repo}"


def instance_to_task(inst: SweInstance, source_file: Path, config: SwebenchConfig) -> Task:
    if inst.specs is not None:
        register_specs(inst.repo, inst.version or "", inst.specs)
    check_known(inst.repo, inst.version if inst.specs is None else (inst.version or ""))
    record = inst.model_dump()
    instance = {k: record[k] for k in SWEBENCH_FIELDS if record.get(k) is not None}
    if "created_at" in instance:
        instance["created_at"] = str(instance["created_at"])  # parquet holds a timestamp
    instance["version"] = inst.version or ""
    return Task(
        id=inst.instance_id,
        format="swe",
        source=source_file,
        instruction=INSTRUCTION.format(problem=inst.problem_statement.strip(), repo_dir=REPO_DIR),
        environment=ImageSpec(image=f"sweb.eval.x86_64.{inst.instance_id.lower()}"),
        workdir=REPO_DIR,
        env={"PATH": PATH},
        timeouts=Timeouts(build_sec=config.build_timeout_sec, agent_sec=inst.agent_timeout_sec,
                          verifier_sec=inst.verifier_timeout_sec),
        verifier=SwebenchVerifier(instance=instance, source=repo_location(inst, source_file.parent), config=config,
                                  network=config.grading_network),
        solution=PatchSolution(patch=inst.patch, repo_dir=REPO_DIR) if inst.patch else None,
        metadata={"repo": inst.repo, "version": inst.version},
    )


def load_swe_file(path: Path, config: SwebenchConfig | None = None) -> list[TaskOrError]:
    config = config or SwebenchConfig()
    try:
        records = read_records(path)
    except TaskFileError as exc:
        return [TaskLoadError(id=path.stem, source=path, file=path.name, field=exc.field, message=exc.message)]
    out: list[TaskOrError] = []
    for lineno, record in records:
        rid = record.get("instance_id", f"{path.stem}:{lineno}") if isinstance(record, dict) else f"{path.stem}:{lineno}"
        where = f"{path.name}:{lineno}"
        try:
            if isinstance(record, Exception):
                raise TaskFileError(where, None, f"invalid JSON: {record}")
            if not isinstance(record, dict):
                raise TaskFileError(where, None, "expected a JSON object")
            try:
                inst = SweInstance(**record)
            except ValidationError as exc:
                raise from_validation(where, exc) from exc
            out.append(instance_to_task(inst, path, config))
        except SpecError as exc:
            out.append(TaskLoadError(id=str(rid), source=path, file=where, field=exc.field, message=exc.message))
        except TaskFileError as exc:
            file = where if exc.file == "instances" else exc.file
            out.append(TaskLoadError(id=str(rid), source=path, file=file, field=exc.field, message=exc.message))
    return out
