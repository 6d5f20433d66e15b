"""The batch job model and the JSONL reader that validates every line before anything runs.

One bad line must not sink the batch: it is reported with its line number and the offending field,
and the valid jobs still run.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

JOB_ID_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$")


class JobLimits(BaseModel):
    """Per-job limits; unset ones fall back to the batch defaults given on the command line."""

    model_config = ConfigDict(extra="forbid")

    max_steps: int | None = Field(default=None, gt=0)
    timeout_s: float | None = Field(default=None, gt=0, description="wall clock for the whole job")
    max_tokens: int | None = Field(default=None, gt=0, description="total token budget of the agent")
    test_timeout_s: float = Field(default=600.0, gt=0)


class BatchJob(BaseModel):
    model_config = ConfigDict(extra="forbid")

    id: str
    repo: str = Field(description="local path, or a git URL the engine can reach")
    base_ref: str = "HEAD"
    task: str | None = None
    issue_file: str | None = Field(default=None, description="file whose text is the task")
    setup: list[str] = Field(default_factory=list, description="commands run before the agent")
    test: str | None = Field(default=None, description="command whose exit code decides fixed/tests-failed")
    limits: JobLimits = Field(default_factory=JobLimits)
    model: str | None = Field(default=None, description="model spec for this job (default: --model)")

    @field_validator("id")
    @classmethod
    def _id_is_a_safe_folder_name(cls, value: str) -> str:
        if not JOB_ID_PATTERN.match(value):
            raise ValueError(f"{value!r} must be 1-100 characters of letters, digits, '.', '_' or '-'")
        return value

    @field_validator("base_ref")
    @classmethod
    def _ref_is_not_an_option(cls, value: str) -> str:
        # It is passed to git as an argument: a leading '-' would be read as an option.
        if not value or value.startswith("-") or any(c.isspace() or ord(c) < 32 for c in value):
            raise ValueError(f"{value!r} must be a branch, tag, commit or ref name (no spaces, no leading '-')")
        return value

    @field_validator("setup", mode="before")
    @classmethod
    def _one_command_is_a_list(cls, value):
        return [value] if isinstance(value, str) else value

    @model_validator(mode="after")
    def _exactly_one_task_source(self) -> "BatchJob":
        if (self.task is None) == (self.issue_file is None):
            raise ValueError("give exactly one of 'task' or 'issue_file'")
        return self

    @property
    def is_local(self) -> bool:
        return not re.match(r"^[a-z+]+://|^git@", self.repo)

    def task_text(self, base_dir: Path) -> str:
        if self.task is not None:
            return self.task
        path = Path(self.issue_file)
        return (path if path.is_absolute() else base_dir / path).read_text(encoding="utf-8")


class JobLineError(BaseModel):
    """Why one line of the jobs file was rejected."""

    line: int
    field: str
    message: str
    job_id: str | None = None

    def __str__(self) -> str:
        return f"line {self.line}: field '{self.field}': {self.message}"


class JobsFile(BaseModel):
    jobs: list[BatchJob]
    errors: list[JobLineError]
    base_dir: Path
    lines: dict[str, int] = {}  # job id -> its line in the file


def load_jobs(path: Path) -> JobsFile:
    """Parse and validate every line; relative repo and issue paths resolve against the file's folder."""
    path = Path(path)
    base_dir = path.resolve().parent
    jobs: list[BatchJob] = []
    errors: list[JobLineError] = []
    seen: dict[str, int] = {}
    for number, raw in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if not raw.strip() or raw.lstrip().startswith("#"):
            continue
        try:
            data = json.loads(raw)
        except json.JSONDecodeError as exc:
            errors.append(JobLineError(line=number, field="(line)", message=f"not valid JSON: {exc.msg}"))
            continue
        if not isinstance(data, dict):
            errors.append(JobLineError(line=number, field="(line)", message="expected a JSON object"))
            continue
        job_id = data.get("id") if isinstance(data.get("id"), str) else None
        try:
            job = BatchJob.model_validate(data)
        except ValidationError as exc:
            errors.extend(_line_errors(number, exc, job_id))
            continue
        problem = _local_problem(job, base_dir)
        if problem:
            errors.append(JobLineError(line=number, field=problem[0], message=problem[1], job_id=job.id))
            continue
        if job.id in seen:
            message = f"duplicate id {job.id!r} (first on line {seen[job.id]})"
            errors.append(JobLineError(line=number, field="id", message=message, job_id=job.id))
            continue
        seen[job.id] = number
        jobs.append(_resolved(job, base_dir))
    return JobsFile(jobs=jobs, errors=errors, base_dir=base_dir, lines=seen)


def _line_errors(number: int, exc: ValidationError, job_id: str | None) -> list[JobLineError]:
    out = []
    for err in exc.errors():
        field = ".".join(str(p) for p in err["loc"]) or "(job)"
        value = f" (got {err['input']!r})" if err["type"] != "missing" and not isinstance(err["input"], dict) else ""
        out.append(JobLineError(line=number, field=field, message=err["msg"] + value, job_id=job_id))
    return out


def _local_problem(job: BatchJob, base_dir: Path) -> tuple[str, str] | None:
    if job.is_local:
        repo = _resolve(job.repo, base_dir)
        bare = (repo / "HEAD").is_file() and (repo / "objects").is_dir()
        if not ((repo / ".git").exists() or bare):
            message = f"{str(repo)!r} is not a git repository (expected a folder with .git, or a bare repository)"
            return "repo", message
    if job.issue_file is not None and not _resolve(job.issue_file, base_dir).is_file():
        return "issue_file", f"{job.issue_file!r} does not exist"
    return None


def _resolve(value: str, base_dir: Path) -> Path:
    path = Path(value).expanduser()
    return path if path.is_absolute() else base_dir / path


def _resolved(job: BatchJob, base_dir: Path) -> BatchJob:
    updates = {}
    if job.is_local:
        updates["repo"] = str(_resolve(job.repo, base_dir).resolve())
    if job.issue_file is not None:
        updates["issue_file"] = str(_resolve(job.issue_file, base_dir).resolve())
    return job.model_copy(update=updates)
