"""Harbor task folders (Terminal-Bench 2.x/3.0, DeepSWE v1.1): task.toml, instruction.md,
environment/, solution/solve.sh, tests/test.sh writing /logs/verifier/reward.txt or reward.json."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from evals.adapters.errors import TaskFileError, from_validation
from evals.task import CollectHook, ImageSpec, Resources, RewardFileVerifier, ScriptSolution, Task, Timeouts
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
    environment_mode: Literal["shared", "separate"] = "shared"
    collect: list[CollectHook] = Field(default_factory=list)
    artifacts: list[str] = Field(default_factory=list)
    network_mode: NetworkMode | None = None


class EnvironmentSection(_Section):
    build_timeout_sec: float = Field(600.0, gt=0)
    docker_image: str | None = None
    cpus: float = Field(1.0, gt=0)
    memory_mb: int = Field(2048, gt=0)
    workdir: str | None = None
    env: dict[str, str] = Field(default_factory=dict)
    network_mode: NetworkMode = "no-network"
    allowed_hosts: list[str] = Field(default_factory=list)  # for network_mode = "allowlist"
    allow_internet: bool | None = None  # deprecated spelling of network_mode


class TaskToml(_Section):
    task: dict = Field(default_factory=dict)
    metadata: dict = Field(default_factory=dict)
    agent: AgentSection = Field(default_factory=AgentSection)
    verifier: VerifierSection = Field(default_factory=VerifierSection)
    environment: EnvironmentSection = Field(default_factory=EnvironmentSection)
    artifacts: list[str] = Field(default_factory=list)


def is_harbor(folder: Path) -> bool:
    return (folder / "task.toml").is_file()


def _read_toml(path: Path) -> dict:
    try:
        return tomllib.loads(path.read_text(encoding="utf-8"))
    except tomllib.TOMLDecodeError as exc:
        raise TaskFileError(path.name, None, f"invalid TOML: {exc}") from exc


def _environment(folder: Path, env: EnvironmentSection) -> ImageSpec:
    env_dir = folder / "environment"
    if (env_dir / "Dockerfile").is_file():
        return ImageSpec(context_dir=env_dir)
    if env.docker_image:
        return ImageSpec(image=env.docker_image)
    if (env_dir / "docker-compose.yaml").is_file():
        raise TaskFileError("environment/docker-compose.yaml", None, "compose environments are not supported")
    raise TaskFileError("environment/Dockerfile", "environment.docker_image", "no Dockerfile and no prebuilt image")


def _network(env: EnvironmentSection, phase_mode: NetworkMode | None, phase: str) -> tuple[bool, list[str]]:
    """A phase's network as (network, allowed_hosts): its own network_mode, else the environment's."""
    mode = phase_mode or env.network_mode
    field = f"{phase}.network_mode" if phase_mode else "environment.network_mode"
    if phase_mode is None and mode == "no-network" and env.allow_internet:
        mode = "public"
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


def load_harbor(folder: Path, task_id: str) -> Task:
    raw = _read_toml(folder / "task.toml")
    try:
        spec = TaskToml(**raw)
    except ValidationError as exc:
        raise from_validation("task.toml", exc) from exc
    instruction_file = folder / "instruction.md"
    if not instruction_file.is_file():
        raise TaskFileError("instruction.md", None, "missing: Harbor tasks carry their prompt in instruction.md")
    instruction = instruction_file.read_text(encoding="utf-8").strip()
    if not instruction:
        raise TaskFileError("instruction.md", None, "empty instruction")
    tests = folder / "tests"
    if not (tests / "test.sh").is_file():
        raise TaskFileError("tests/test.sh", None, "missing: Harbor tasks are graded by tests/test.sh")
    env = spec.environment
    _check_allowed_hosts(env)
    network, allowed_hosts = _network(env, spec.agent.network_mode, "agent")
    # A separate verifier defaults to no network (grading from artifacts); a shared one to the
    # agent's (same container). Its own network_mode overrides either.
    if spec.verifier.network_mode:
        verifier_network, verifier_hosts = _network(env, spec.verifier.network_mode, "verifier")
    elif spec.verifier.environment_mode == "shared":
        verifier_network, verifier_hosts = network, allowed_hosts
    else:
        verifier_network, verifier_hosts = False, []
    verifier_image = ImageSpec(context_dir=tests) if (tests / "Dockerfile").is_file() else None
    solve = folder / "solution"
    solution = None
    if (solve / "solve.sh").is_file():
        solution = ScriptSolution(source=solve, container_dir="/solution", entry="bash /solution/solve.sh")
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
        env=env.env,
        resources=Resources(cpus=env.cpus, memory_mb=env.memory_mb),
        timeouts=Timeouts(
            build_sec=env.build_timeout_sec, agent_sec=spec.agent.timeout_sec, verifier_sec=spec.verifier.timeout_sec
        ),
        verifier=RewardFileVerifier(
            tests_dir=tests,
            environment_mode=spec.verifier.environment_mode,
            verifier_image=verifier_image,
            env=spec.verifier.env,
            collect=spec.verifier.collect,
            artifacts=spec.verifier.artifacts or spec.artifacts,
            user=spec.verifier.user,
            network=verifier_network,
            allowed_hosts=verifier_hosts,
        ),
        solution=solution,
        terminal=True,
        metadata={"task": spec.task, **spec.metadata},
    )
