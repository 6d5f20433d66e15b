"""The one task schema every adapter produces.

A `Task` says what image to start (prebuilt or built from a context), what the agent is told, how long
each phase may take, what the network policy is, how the result is graded (`verifier`) and how the
reference solution is applied (`solution`, used by the oracle agent). Adapters for Terminal-Bench 1.x,
Harbor (TB 2.x/3.0, DeepSWE), SWE-bench instances and CyberGym-style tasks fill it in; the runner
never looks at the original files again except through paths recorded here.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Literal, Union

from pydantic import BaseModel, ConfigDict, Field, model_validator

from evals.swebench.config import SwebenchConfig

TaskFormat = Literal["tb1", "harbor", "swe", "cybergym"]


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ImageSpec(_Model):
    """How to obtain an image: a prebuilt tag, or a build context assembled from files.

    The build context is `context_dir` (copied), plus `copy_files` (name in context -> host path),
    plus `generated_files` (name in context -> text, e.g. a generated Dockerfile), in that order.
    """

    image: str | None = None
    context_dir: Path | None = None
    dockerfile: str = "Dockerfile"
    copy_files: dict[str, Path] = Field(default_factory=dict)
    generated_files: dict[str, str] = Field(default_factory=dict)

    @property
    def prebuilt(self) -> bool:
        return self.image is not None and self.context_dir is None and not self.generated_files


class Resources(_Model):
    cpus: float = Field(1.0, gt=0)
    memory_mb: int = Field(2048, gt=0)
    pids_limit: int = Field(1024, gt=0)
    # Recorded as the task asks; the Docker engine, like Harbor's Docker environment, does not cap disk.
    storage_mb: int | None = Field(None, gt=0)
    gpus: int = Field(0, ge=0)


class Timeouts(_Model):
    build_sec: float = Field(600.0, gt=0)
    agent_sec: float = Field(360.0, gt=0)
    verifier_sec: float = Field(60.0, gt=0)

    def scaled(self, factor: float) -> "Timeouts":
        return Timeouts(
            build_sec=self.build_sec * factor,
            agent_sec=self.agent_sec * factor,
            verifier_sec=self.verifier_sec * factor,
        )


# ---- verifiers -------------------------------------------------------------------------------


class PytestSummaryVerifier(_Model):
    """TB1: copy run-tests.sh and tests/ to /tests, run it, parse pytest's short test summary."""

    kind: Literal["tb1-pytest"] = "tb1-pytest"
    run_tests: Path
    tests_dir: Path | None = None


class CollectHook(_Model):
    command: str
    timeout_sec: float = 300.0


class RewardFileVerifier(_Model):
    """Harbor: run tests/test.sh, read /logs/verifier/reward.json or reward.txt.

    `separate` mode grades in a fresh container (built from tests/Dockerfile when present) that
    only receives /logs/artifacts from the agent's container, after the collect hooks ran there.
    """

    kind: Literal["harbor-reward"] = "harbor-reward"
    tests_dir: Path
    environment_mode: Literal["shared", "separate"] = "shared"
    verifier_image: ImageSpec | None = None
    env: dict[str, str] = Field(default_factory=dict)
    collect: list[CollectHook] = Field(default_factory=list)
    artifacts: list[str] = Field(default_factory=list)
    user: str | None = None  # who runs test.sh; None: the image's USER (never the agent's user)
    # The verifier's network. A `separate` verifier's container gets it; a `shared` one runs in the
    # agent's container, which is taken off the network when this is off (it cannot gain one).
    network: bool = False
    allowed_hosts: list[str] = Field(default_factory=list)


class SwebenchVerifier(_Model):
    """SWE-bench with the official rules (evals/swebench/): swebench's eval script and grading on the
    agent's diff, in a fresh offline container from the instance's sweb.eval image."""

    kind: Literal["swebench"] = "swebench"
    instance: dict  # the SWE-bench record (instance_id, repo, version, base_commit, test_patch, F2P, P2P...)
    source: str  # where the repository comes from: a URL, a local clone or a git bundle
    config: SwebenchConfig = Field(default_factory=SwebenchConfig)
    network: bool = True  # the grading containers' network (config.grading_network)


class PocBuild(_Model):
    """One build a CyberGym PoC runs against (the `-vul` or the `-fix` one): a prebuilt runner
    image (ARVO's `n132/arvo:<id>-vul`, OSS-Fuzz's `cybergym/oss-fuzz:<id>-fix`) used when the
    engine has or can pull it, else an image built from the task's sources with its build script."""

    image: str | None = None
    command: list[str] = Field(default_factory=list)  # runs the PoC at /tmp/poc in `image`
    source: ImageSpec | None = None
    source_command: list[str] = Field(default_factory=lambda: ["/usr/local/bin/horizon-run-poc"])


class CyberGymVerifier(_Model):
    """CyberGym: PoCs reach a per-trial submission service through the task's `submit.sh`; the final
    submission is run on the vulnerable and the fixed build (evals/cybergym/)."""

    kind: Literal["cybergym"] = "cybergym"
    task_id: str  # CyberGym's own id: arvo:N, oss-fuzz:N, or local:NAME for tasks built from sources
    agent_task_id: str  # the id submit.sh sends (a masked id differs from task_id)
    agent_id: str
    checksum: str  # sha256(agent_task_id + agent_id + salt), checked on every submission
    vul: PocBuild
    fix: PocBuild
    run_timeout_sec: float = Field(10.0, gt=0)  # the inner `timeout -s SIGKILL` around the program
    container_timeout_sec: float = Field(60.0, gt=0)  # the wait for a PoC's container


Verifier = Annotated[
    Union[PytestSummaryVerifier, RewardFileVerifier, SwebenchVerifier, CyberGymVerifier],
    Field(discriminator="kind"),
]

# ---- reference solutions (used by the oracle agent) -----------------------------------------


class ScriptSolution(_Model):
    """A shell script (TB1 solution.sh, Harbor solution/) run in the agent's terminal."""

    kind: Literal["script"] = "script"
    source: Path  # a file, or a folder copied whole
    container_dir: str
    entry: str


class KeystrokeStep(_Model):
    command: str
    min_timeout_sec: float = 0.1
    block: bool = False
    append_enter: bool = False


class KeystrokeSolution(_Model):
    """TB1 solution.yaml: keystrokes typed into the agent's tmux session, step by step."""

    kind: Literal["keystrokes"] = "keystrokes"
    steps: list[KeystrokeStep]


class PatchSolution(_Model):
    kind: Literal["patch"] = "patch"
    patch: str
    repo_dir: str


Solution = Annotated[
    Union[ScriptSolution, KeystrokeSolution, PatchSolution],
    Field(discriminator="kind"),
]


class TaskStep(_Model):
    """One step of a Harbor multi-step task (`[[steps]]`, files under steps/<name>/): its own
    instruction, reference solution and verifier, run in order in the same container."""

    name: str
    instruction: str = Field(min_length=1)
    solution: Solution | None = None
    verifier: Verifier
    agent_sec: float | None = Field(None, gt=0)  # None: the task's agent timeout
    workdir_files: Path | None = None  # steps/<name>/workdir: copied into the workdir first (setup.sh run)
    min_reward: float | dict[str, float] | None = None  # below it, the remaining steps are skipped


class Task(_Model):
    id: str
    format: TaskFormat
    source: Path
    instruction: str = Field(min_length=1)
    environment: ImageSpec
    workdir: str | None = None  # None: the image's WORKDIR
    network: bool = False  # the agent phase's network: none, or full...
    allowed_hosts: list[str] = Field(default_factory=list)  # ...or, when set, only these hosts (egress proxy)
    user: str | None = None  # the agent's shell and terminal run as this user; None: the image's USER
    env: dict[str, str] = Field(default_factory=dict)
    resources: Resources = Field(default_factory=Resources)
    timeouts: Timeouts = Field(default_factory=Timeouts)
    verifier: Verifier
    solution: Solution | None = None
    terminal: bool = False  # Terminal-Bench: the agent acts through a tmux session
    # environment/docker-compose.yaml: its other services run beside the agent's container (evals/compose.py)
    compose_file: Path | None = None
    steps: list[TaskStep] = Field(default_factory=list)  # Harbor multi-step tasks (evals/multi_step.py)
    multi_step_reward_strategy: Literal["mean", "final"] = "mean"
    metadata: dict[str, object] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _allowlist_needs_network(self):
        if self.allowed_hosts and not self.network:
            raise ValueError("allowed_hosts: only meaningful with network=True (an allowlist is some network)")
        return self


class TaskLoadError(_Model):
    """A task folder or instance that could not be loaded: which file, which field, what was wrong."""

    id: str
    source: Path
    file: str
    field: str | None
    message: str

    def __str__(self) -> str:
        where = f"{self.file}" + (f" [{self.field}]" if self.field else "")
        return f"{self.id}: {where}: {self.message}"


TaskOrError = Union[Task, TaskLoadError]
