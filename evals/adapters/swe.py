"""SWE-bench-style instances (JSON or JSONL): the repository comes from a local folder or a git
bundle, the agent works at the base commit without network, and grading replays the diff it leaves
in a fresh container (see evals/graders/swe_patch.py)."""

from __future__ import annotations

import json
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from evals.adapters.errors import TaskFileError, from_validation
from evals.task import ImageSpec, PatchSolution, SweVerifier, Task, TaskLoadError, TaskOrError, Timeouts

REPO_DIR = "/testbed"

INSTRUCTION = """{problem}

The repository is checked out at {repo_dir} (git, at the base commit). There is no network access.
Change the source so the problem is solved; your work is graded from `git diff` against the base
commit, by running the project's tests."""

# Stripping every ref but `main` and pruning the reflog means later commits (the fix) cannot leak to
# the agent through history, as DeepSWE's environment Dockerfiles do.
DOCKERFILE = """FROM {base}
COPY repo /tmp/repo-source
RUN git clone -q /tmp/repo-source {repo_dir} && rm -rf /tmp/repo-source \\
 && cd {repo_dir} && git checkout -q -B main {commit} && git remote remove origin \\
 && git tag -l | xargs -r git tag -d >/dev/null \\
 && git for-each-ref --format='%(refname:short)' refs/heads | grep -vx main | xargs -r git branch -q -D \\
 && git reflog expire --expire=now --all && git gc -q --prune=now \\
 && git config --global user.email agent@horizon.local && git config --global user.name agent
WORKDIR {repo_dir}
"""


class SweInstance(BaseModel):
    model_config = ConfigDict(extra="allow")

    instance_id: str = Field(min_length=1)
    repo: str = Field(min_length=1)
    base_commit: str = Field(pattern=r"^[0-9a-f]{7,40}$")
    problem_statement: str = Field(min_length=1)
    patch: str = ""
    test_patch: str = Field(min_length=1)
    FAIL_TO_PASS: list[str]
    PASS_TO_PASS: list[str] = Field(default_factory=list)
    repo_path: str | None = None  # a local clone, relative to the instances file
    repo_bundle: str | None = None  # a `git bundle`, relative to the instances file
    test_command: str | None = None
    agent_timeout_sec: float = Field(1800.0, gt=0)
    verifier_timeout_sec: float = Field(600.0, gt=0)

    @field_validator("FAIL_TO_PASS", "PASS_TO_PASS", mode="before")
    @classmethod
    def _json_list(cls, value):
        # SWE-bench's datasets store these lists JSON-encoded inside a string.
        return json.loads(value) if isinstance(value, str) else value


def is_swe_file(path: Path) -> bool:
    return path.is_file() and path.suffix in (".jsonl", ".json")


def _read_records(path: Path) -> list[tuple[int, object]]:
    text = path.read_text(encoding="utf-8")
    if path.suffix == ".json":
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise TaskFileError(path.name, f"line {exc.lineno}", f"invalid JSON: {exc.msg}") from exc
        return list(enumerate(data if isinstance(data, list) else [data], 1))
    records = []
    for lineno, line in enumerate(text.splitlines(), 1):
        if line.strip():
            try:
                records.append((lineno, json.loads(line)))
            except json.JSONDecodeError as exc:
                records.append((lineno, exc))
    return records


def _repo_source(inst: SweInstance, base: Path) -> Path:
    candidates = [base / p for p in (inst.repo_bundle, inst.repo_path) if p]
    slug = inst.repo.replace("/", "__")
    candidates += [base / "repos" / f"{slug}.bundle", base / "repos" / slug]
    for path in candidates:
        if path.exists():
            return path
    raise TaskFileError("instances", "repo", f"no repository for {inst.repo!r}: tried {[str(c) for c in candidates]}")


def _test_files(ids: list[str]) -> list[str]:
    return sorted({node.split("::")[0] for node in ids})


def instance_to_task(inst: SweInstance, source_file: Path, base_image: str) -> Task:
    repo = _repo_source(inst, source_file.parent)
    all_ids = inst.FAIL_TO_PASS + inst.PASS_TO_PASS
    command = inst.test_command or "python3 -m pytest -rA -p no:cacheprovider " + " ".join(_test_files(all_ids))
    dockerfile = DOCKERFILE.format(base=base_image, repo_dir=REPO_DIR, commit=inst.base_commit)
    return Task(
        id=inst.instance_id,
        format="swe",
        source=source_file,
        instruction=INSTRUCTION.format(problem=inst.problem_statement.strip(), repo_dir=REPO_DIR),
        environment=ImageSpec(copy_files={"repo": repo}, generated_files={"Dockerfile": dockerfile}),
        workdir=REPO_DIR,
        timeouts=Timeouts(agent_sec=inst.agent_timeout_sec, verifier_sec=inst.verifier_timeout_sec),
        verifier=SweVerifier(
            repo_dir=REPO_DIR,
            base_commit=inst.base_commit,
            test_patch=inst.test_patch,
            fail_to_pass=inst.FAIL_TO_PASS,
            pass_to_pass=inst.PASS_TO_PASS,
            test_command=command,
        ),
        solution=PatchSolution(patch=inst.patch, repo_dir=REPO_DIR) if inst.patch else None,
        metadata={"repo": inst.repo},
    )


def load_swe_file(path: Path, base_image: str) -> list[TaskOrError]:
    out: list[TaskOrError] = []
    try:
        records = _read_records(path)
    except TaskFileError as exc:
        return [TaskLoadError(id=path.stem, source=path, file=path.name, field=exc.field, message=exc.message)]
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
            out.append(instance_to_task(inst, path, base_image))
        except TaskFileError as exc:
            file = where if exc.file == "instances" else exc.file
            out.append(TaskLoadError(id=str(rid), source=path, file=file, field=exc.field, message=exc.message))
    return out
