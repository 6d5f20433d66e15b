"""Harbor task folders (Terminal-Bench 2.x/3.0, DeepSWE v1.1): task.toml, instruction.md,
environment/, solution/solve.sh, tests/test.sh writing /logs/verifier/reward.txt or reward.json."""

from __future__ import annotations

import os
import re
import tomllib
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from evals.adapters.errors import TaskFileError, from_validation
from evals.task import CollectHook, ImageSpec, Resources, RewardFileVerifier, ScriptSolution, Task, TaskStep, Timeouts
from sandbox.egress_hosts import parse_allowed_host

NetworkMode = Literal["no-network", "public", "allowlist"]
# A user name from /etc/passwd, a uid, or either with ":group".
_USER = re.compile(r"^(?:[a-z_][a-z0-9_.-]*\$?|\d+)(?::(?:[a-z_][a-z0-9_.-]*|\d+))?$", re.I)


class _Section(BaseModel):
    model_config = ConfigDict(extra="allow")


class _PhaseSection(_Section):
    user: str | int | None = None

    @field_validator("user")
    @classmethod
    def _user(cls, v: str | int | None) -> str | None:
        if v is None:
            return None
        text = str(v)
        if isinstance(v, bool) or (isinstance(v, int) and v < 0) or not _USER.match(text):
            raise ValueError(f"expected a user name, a uid, or either with ':group' (e.g. 'agent' or '1000:1000'), got {v!r}")
        return text


class AgentSection(_PhaseSection):
    timeout_sec: float = Field(600.0, gt=0)
    network_mode: NetworkMode | None = None


class VerifierSection(_PhaseSection):
    timeout_sec: float = Field(600.0, gt=0)
    env: dict[str, str] = Field(default_factory=dict)
    # Harbor: unset means "separate" when [verifier.environment] is given, else "shared".
    environment_mode: Literal["shared", "separate"] | None = None
    environment: "EnvironmentSection | None" = None  # the separate verifier's own environment
    collect: list[CollectHook] = Field(default_factory=list)
    artifacts: list[str] = Field(default_factory=list)
    network_mode: NetworkMode | None = None


_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([KMGT])i?B?\s*$", re.I)
_MB_PER_UNIT = {"K": 1 / 1024, "M": 1, "G": 1024, "T": 1024 * 1024}


def size_to_mb(value: object) -> int:
    """A size as Harbor writes it: "4G", "512M", "2048K" (binary units) or an integer of MB."""
    if isinstance(value, bool):
        raise ValueError(f"expected a size like '4G' or '512M', or an integer of MB, got {value!r}")
    if isinstance(value, int):
        if value <= 0:
            raise ValueError(f"expected a positive number of MB, got {value!r}")
        return value
    m = _SIZE.match(str(value))
    if not m:
        raise ValueError(f"expected a size like '4G' or '512M', or an integer of MB, got {value!r}")
    mb = int(float(m.group(1)) * _MB_PER_UNIT[m.group(2).upper()])
    if mb <= 0:
        raise ValueError(f"expected at least 1 MB, got {value!r}")
    return mb


class EnvironmentSection(_Section):
    build_timeout_sec: float = Field(600.0, gt=0)
    docker_image: str | None = None
    cpus: float = Field(1.0, gt=0)
    # Harbor leaves memory unlimited when unset; the runner keeps its 2 GiB default for safety.
    memory_mb: int = Field(2048, gt=0)
    storage_mb: int | None = Field(None, gt=0)
    gpus: int = Field(0, ge=0)
    gpu_types: list[str] | None = None
    workdir: str | None = None
    env: dict[str, str] = Field(default_factory=dict)
    # Harbor's default: internet on unless the task turns it off.
    network_mode: NetworkMode = "public"
    allowed_hosts: list[str] = Field(default_factory=list)  # for network_mode = "allowlist"
    allow_internet: bool | None = None  # deprecated spelling of network_mode

    @model_validator(mode="before")
    @classmethod
    def _legacy_sizes(cls, data):
        """TB 2.0's `memory = "2G"` / `storage = "10G"` (Harbor's deprecated spellings) -> *_mb."""
        if not isinstance(data, dict):
            return data
        data = dict(data)
        for old, new in (("memory", "memory_mb"), ("storage", "storage_mb")):
            if old in data:
                mb = size_to_mb(data.pop(old))
                if new in data and size_to_mb(data[new]) != mb:
                    raise ValueError(f"{old} = {mb} MB conflicts with {new} = {data[new]!r}")
                data.setdefault(new, mb)
            if isinstance(data.get(new), str):
                data[new] = size_to_mb(data[new])
        return data


VerifierSection.model_rebuild()


class StepSection(_Section):
    name: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
    agent: AgentSection = Field(default_factory=AgentSection)
    verifier: VerifierSection = Field(default_factory=VerifierSection)
    min_reward: float | dict[str, float] | None = None


class TaskToml(_Section):
    task: dict = Field(default_factory=dict)
    metadata: dict = Field(default_factory=dict)
    agent: AgentSection = Field(default_factory=AgentSection)
    verifier: VerifierSection = Field(default_factory=VerifierSection)
    environment: EnvironmentSection = Field(default_factory=EnvironmentSection)
    artifacts: list[str] = Field(default_factory=list)
    steps: list[StepSection] | None = None  # Harbor's multi-step tasks
    multi_step_reward_strategy: Literal["mean", "final"] | None = None


def is_harbor(folder: Path) -> bool:
    return (folder / "task.toml").is_file()


def _read_toml(path: Path) -> dict:
    try:
        return tomllib.loads(path.read_text(encoding="utf-8"))
    except tomllib.TOMLDecodeError as exc:
        raise TaskFileError(path.name, None, f"invalid TOML: {exc}") from exc


def _environment(folder: Path, env: EnvironmentSection) -> ImageSpec:
    """Harbor's choice: `docker_image` is used as is (environment/Dockerfile, when present, is only
    the fallback when that image cannot be had); otherwise environment/Dockerfile is built."""
    env_dir = folder / "environment"
    has_dockerfile = (env_dir / "Dockerfile").is_file()
    if env.docker_image:
        return ImageSpec(image=env.docker_image, context_dir=env_dir if has_dockerfile else None)
    if has_dockerfile:
        return ImageSpec(context_dir=env_dir)
    if (env_dir / "docker-compose.yaml").is_file():
        raise TaskFileError("environment/docker-compose.yaml", "environment.docker_image",
                            "a compose environment needs its main service's image: environment/Dockerfile "
                            "or [environment] docker_image")
    raise TaskFileError("environment/Dockerfile", "environment.docker_image", "no Dockerfile and no prebuilt image")


_TEMPLATE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-(.*))?\}")


def _resolve_env(env: dict[str, str], field: str) -> dict[str, str]:
    """Harbor's env templates: a whole value "${VAR}" or "${VAR:-default}" comes from this host's environment."""
    out = {}
    for key, value in env.items():
        m = _TEMPLATE.fullmatch(value)
        if not m:
            out[key] = value
        elif m.group(1) in os.environ:
            out[key] = os.environ[m.group(1)]
        elif m.group(2) is not None:
            out[key] = m.group(2)
        else:
            raise TaskFileError("task.toml", f"{field}.{key}", f"{value} needs ${m.group(1)} set on this host "
                                                               f"(or a default: ${{{m.group(1)}:-value}})")
    return out


def _compose_file(folder: Path, allowed_hosts: list[str]) -> Path | None:
    path = folder / "environment" / "docker-compose.yaml"
    if not path.is_file():
        return None
    if allowed_hosts:
        raise TaskFileError("task.toml", "environment.network_mode", "'allowlist' together with "
                            "environment/docker-compose.yaml is not supported: use 'public' or 'no-network'")
    return path


def _network(env: EnvironmentSection, phase_mode: NetworkMode | None, phase: str) -> tuple[bool, list[str]]:
    """A phase's network as (network, allowed_hosts): its own network_mode, else the environment's."""
    mode = phase_mode or env.network_mode
    field = f"{phase}.network_mode" if phase_mode else "environment.network_mode"
    if phase_mode is None and "network_mode" not in env.model_fields_set and env.allow_internet is not None:
        mode = "public" if env.allow_internet else "no-network"  # the deprecated spelling, as Harbor reads it
    if mode != "allowlist":
        return mode == "public", []
    if not env.allowed_hosts:
        raise TaskFileError("task.toml", "environment.allowed_hosts",
                            f"{field} = 'allowlist' needs a non-empty allowed_hosts list (e.g. ['pypi.org:443'])")
    return True, list(env.allowed_hosts)


def _check_allowed_hosts(env: EnvironmentSection) -> None:
    for i, entry in enumerate(env.allowed_hosts):
        try:
            parse_allowed_host(entry, "allowed_hosts")
        except ValueError as exc:
            raise TaskFileError("task.toml", f"environment.allowed_hosts[{i}]",
                                str(exc).removeprefix("allowed_hosts: ")) from None


def _steps(folder: Path, spec: TaskToml, verifier: RewardFileVerifier, solution) -> list[TaskStep]:
    """Harbor's [[steps]]: steps/<name>/instruction.md, and its own tests/ and solution/ when present
    (else the task's), run in order in one container."""
    steps = []
    seen: set[str] = set()
    for i, step in enumerate(spec.steps or []):
        if step.name.lower() in seen:
            raise TaskFileError("task.toml", f"steps[{i}].name", f"duplicate step name {step.name!r}")
        seen.add(step.name.lower())
        root = folder / "steps" / step.name
        instruction = root / "instruction.md"
        if not instruction.is_file():
            raise TaskFileError(f"steps/{step.name}/instruction.md", f"steps[{i}]", "missing: every step has its own prompt")
        tests = root / "tests"
        step_verifier = verifier
        if (tests / "test.sh").is_file():
            step_verifier = verifier.model_copy(update={"tests_dir": tests})
        elif not (verifier.tests_dir / "test.sh").is_file():
            raise TaskFileError(f"steps/{step.name}/tests/test.sh", f"steps[{i}]", "missing, and the task has no tests/test.sh")
        step_solution = solution
        if (root / "solution" / "solve.sh").is_file():
            step_solution = ScriptSolution(source=root / "solution", container_dir="/solution",
                                           entry="chmod +x /solution/solve.sh; /solution/solve.sh")
        steps.append(TaskStep(
            name=step.name, instruction=instruction.read_text(encoding="utf-8").strip(), solution=step_solution,
            verifier=step_verifier, agent_sec=step.agent.timeout_sec if "timeout_sec" in step.agent.model_fields_set else None,
            workdir_files=root / "workdir" if (root / "workdir").is_dir() else None, min_reward=step.min_reward))
    return steps


def load_harbor(folder: Path, task_id: str) -> Task:
    raw = _read_toml(folder / "task.toml")
    try:
        spec = TaskToml(**raw)
    except ValidationError as exc:
        raise from_validation("task.toml", exc) from exc
    instruction_file = folder / "instruction.md"
    multi_step = bool(spec.steps)  # each step has its own instruction (and maybe tests)
    if not instruction_file.is_file() and not multi_step:
        raise TaskFileError("instruction.md", None, "missing: Harbor tasks carry their prompt in instruction.md")
    instruction = instruction_file.read_text(encoding="utf-8").strip() if instruction_file.is_file() else \
        f"multi-step task: {len(spec.steps)} steps"
    if not instruction:
        raise TaskFileError("instruction.md", None, "empty instruction")
    tests = folder / "tests"
    if not (tests / "test.sh").is_file() and not multi_step:
        raise TaskFileError("tests/test.sh", None, "missing: Harbor tasks are graded by tests/test.sh")
    verifier = spec.verifier
    mode = verifier.environment_mode or ("separate" if verifier.environment is not None else "shared")
    if mode == "shared" and verifier.environment is not None:
        raise TaskFileError("task.toml", "verifier.environment_mode", "'shared' is incompatible with "
                                                                     "[verifier.environment]: omit one of them")
    env = spec.environment
    _check_allowed_hosts(env)
    network, allowed_hosts = _network(env, spec.agent.network_mode, "agent")
    # A separate verifier defaults to no network (grading from artifacts); a shared one to the
    # agent's (same container). Its own network_mode overrides either.
    if spec.verifier.network_mode:
        verifier_network, verifier_hosts = _network(env, spec.verifier.network_mode, "verifier")
    elif mode == "shared":
        verifier_network, verifier_hosts = network, allowed_hosts
    elif verifier.environment is not None and "network_mode" in verifier.environment.model_fields_set:
        verifier_network, verifier_hosts = _network(verifier.environment, None, "verifier.environment")
    else:
        verifier_network, verifier_hosts = False, []
    verifier_image = ImageSpec(context_dir=tests) if (tests / "Dockerfile").is_file() else None
    if verifier.environment is not None and verifier.environment.docker_image:
        verifier_image = ImageSpec(image=verifier.environment.docker_image,
                                   context_dir=tests if (tests / "Dockerfile").is_file() else None)
    solve = folder / "solution"
    solution = None
    if (solve / "solve.sh").is_file():
        # Harbor makes solve.sh executable and starts it directly: its shebang picks the shell.
        solution = ScriptSolution(source=solve, container_dir="/solution",
                                  entry="chmod +x /solution/solve.sh; /solution/solve.sh")
    main_verifier = RewardFileVerifier(
        tests_dir=tests,
        environment_mode=mode,
        verifier_image=verifier_image,
        env=_resolve_env({**(verifier.environment.env if verifier.environment else {}), **spec.verifier.env},
                         "verifier.env"),
        collect=spec.verifier.collect,
        artifacts=spec.verifier.artifacts or spec.artifacts,
        user=spec.verifier.user,
        network=verifier_network,
        allowed_hosts=verifier_hosts,
    )
    return Task(
        id=task_id,
        format="harbor",
        source=folder,
        instruction=instruction,
        environment=_environment(folder, env),
        workdir=env.workdir,
        network=network,
        allowed_hosts=allowed_hosts,
        user=spec.agent.user,
        env=_resolve_env(env.env, "environment.env"),
        resources=Resources(cpus=env.cpus, memory_mb=env.memory_mb, storage_mb=env.storage_mb, gpus=env.gpus),
        timeouts=Timeouts(
            build_sec=env.build_timeout_sec, agent_sec=spec.agent.timeout_sec, verifier_sec=spec.verifier.timeout_sec
        ),
        verifier=main_verifier,
        solution=solution,
        steps=_steps(folder, spec, main_verifier, solution),
        multi_step_reward_strategy=spec.multi_step_reward_strategy or "mean",
        terminal=True,
        compose_file=_compose_file(folder, allowed_hosts),
        metadata={"task": spec.task, **spec.metadata},
    )
