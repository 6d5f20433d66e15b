"""Fixtures for the eval runner's Docker tests."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
TASKS = ROOT / "evals" / "tasks"


@pytest.fixture(autouse=True)
def _offline_substitutes(monkeypatch):
    """No registry is reachable here: the sample suites' python:*/ubuntu:*/t-bench bases run on the
    Horizon base, as `--offline-substitute` does (tests of the default policy turn it off)."""
    monkeypatch.setenv("HORIZON_EVAL_OFFLINE_SUBSTITUTE", "1")


@pytest.fixture(scope="session")
def eval_docker(docker_client):
    """A Docker engine with the Horizon base image (scripts/setup.sh builds it)."""
    import docker

    from sandbox import BASE_IMAGE

    try:
        docker_client.images.get(BASE_IMAGE)
    except docker.errors.ImageNotFound:
        pytest.fail(f"base image {BASE_IMAGE} is missing: run `horizon sandbox build` (scripts/setup.sh does)")
    return docker_client


@pytest.fixture
def suite(tmp_path):
    """Copy sample tasks into a fresh suite folder: suite("tb1-hello-file", ...) -> Path."""

    def make(*names: str, group: str = "terminal-bench") -> Path:
        root = tmp_path / "suite"
        root.mkdir(exist_ok=True)
        for name in names:
            shutil.copytree(TASKS / group / name, root / name)
        return root

    return make
