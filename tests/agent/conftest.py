"""Fixtures for the agent tests: a real Docker sandbox, scratch workspaces in it, replay scripts."""

from __future__ import annotations

import itertools

import pytest

from agent.config import ToolLimits
from agent.tools import ToolContext, ToolSet, builtin_tools

_workspace_ids = itertools.count(1)


@pytest.fixture(scope="session")
def sandbox(docker_client):
    """One sandbox from the base image shared by the agent tests; each test works in its own folder."""
    from sandbox import BASE_IMAGE, Sandbox, SandboxConfig

    with Sandbox.start(SandboxConfig(image=BASE_IMAGE, env={"PYTHONDONTWRITEBYTECODE": "1"})) as sb:
        yield sb


@pytest.fixture
def workdir(sandbox) -> str:
    """A fresh empty folder in the shared sandbox."""
    path = f"/workspace/t{next(_workspace_ids)}"
    result = sandbox.exec_once(["mkdir", "-p", path], timeout=30)
    assert result.exit_code == 0, result.output
    return path


@pytest.fixture
def tools(sandbox, workdir) -> ToolSet:
    sandbox.exec(f"cd {workdir}", timeout=30)  # as in a real run, the shell starts in the workspace
    return ToolSet(builtin_tools(sandbox, ToolLimits(), workdir=workdir))


@pytest.fixture
def ctx(sandbox, workdir) -> ToolContext:
    return ToolContext(sandbox=sandbox, limits=ToolLimits(), workdir=workdir)
