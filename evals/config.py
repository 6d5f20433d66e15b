"""Eval runner configuration (a TOML file, validated at the edge).

    max_infra_retries = 2          # retries of a trial after an infrastructure error
    pull = "missing"               # always | missing | never (evals/image_policy.py)
    offline_substitute = false     # run unpullable python:*/ubuntu:*/... bases on the Horizon base
    network = "task"               # task (each format's default) | public | no-network, for every agent phase
    [images]                       # base-image substitutions (see evals/image_policy.py)
    "python:*" = "horizon/base:bookworm"
    [[engines]]                    # tasks are spread round-robin over these Docker engines
    name = "local"
    docker_host = "unix:///var/run/docker.sock"
    [agent]                        # AgentConfig overrides for the horizon agent
    max_steps = 100
    [swebench]                     # SWE-bench images and rules (evals/swebench/config.py)
    pull = "missing"
"""

from __future__ import annotations

import os
import tomllib
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from evals.image_policy import ImagePolicy, PullMode
from evals.swebench.config import SwebenchConfig
from sandbox import BASE_IMAGE

OFFLINE_SUBSTITUTE_ENV = "HORIZON_EVAL_OFFLINE_SUBSTITUTE"
NetworkOverride = Literal["task", "public", "no-network"]


class EngineConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str = "local"
    docker_host: str | None = None  # None: $DOCKER_HOST or the default socket


class EvalConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")
    engines: list[EngineConfig] = Field(default_factory=lambda: [EngineConfig()], min_length=1)
    images: dict[str, str] = Field(default_factory=dict)
    max_infra_retries: int = Field(2, ge=0, le=10)
    pull: PullMode = "missing"
    # $HORIZON_EVAL_OFFLINE_SUBSTITUTE=1 turns it on by default (offline machines, the test suite).
    offline_substitute: bool = Field(default_factory=lambda: os.environ.get(OFFLINE_SUBSTITUTE_ENV) == "1")
    network: NetworkOverride = "task"  # a run-wide override of every task's agent-phase network
    base_image: str = BASE_IMAGE
    agent: dict = Field(default_factory=dict)
    swebench: SwebenchConfig = Field(default_factory=SwebenchConfig)  # [swebench]: pulls, offline substitute


    @property
    def image_policy(self) -> ImagePolicy:
        return ImagePolicy(pull=self.pull, offline_substitute=self.offline_substitute)


class ConfigError(ValueError):
    pass


def load_config(path: Path | None) -> EvalConfig:
    if path is None:
        return EvalConfig()
    try:
        raw = tomllib.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise ConfigError(f"{path}: cannot read the eval config: {exc}") from exc
    try:
        return EvalConfig(**raw)
    except ValidationError as exc:
        err = exc.errors()[0]
        field = ".".join(str(p) for p in err["loc"])
        raise ConfigError(f"{path}: field {field!r}: {err['msg']} (got {err.get('input')!r})") from exc
