"""The `[swebench]` table of the eval config.

    [swebench]
    pull = "missing"              # always | missing | never: the published sweb.eval.* image
    namespace = "swebench"        # where published images live (swebench/sweb.eval.x86_64.<id>)
    offline_substitute = false    # build on horizon/base:bookworm with a conda stand-in (not comparable)
    check_environment = true      # an unresolved instance is the agent's only if the gold patch resolves
    grading_network = true        # eval.sh runs with network, as run_evaluation runs it
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from sandbox import BASE_IMAGE

PullPolicy = Literal["always", "missing", "never"]


class SwebenchConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    pull: PullPolicy = "missing"
    namespace: str = Field("swebench", min_length=1)
    # When set, images are built from the local base image instead of ubuntu + miniconda (which need
    # Docker Hub and repo.anaconda.com); every result then says it is not comparable.
    offline_substitute: bool = False
    substitute_base: str = BASE_IMAGE
    check_environment: bool = True
    # run_evaluation runs eval.sh with the engine's network (install steps in eval scripts fetch build
    # dependencies); the agent's container is offline either way. Off: grading offline, where such an
    # install fails and the gold check reports an environment_error.
    grading_network: bool = True
    build_timeout_sec: float = Field(3600.0, gt=0)
