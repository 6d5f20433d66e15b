"""Fixtures for sandbox tests: the base image (built by scripts/setup.sh) and a shared sandbox."""

from __future__ import annotations

import pytest

from sandbox import BASE_IMAGE, Sandbox, SandboxConfig


@pytest.fixture(scope="session")
def base_image(docker_client) -> str:
    """The base image, built here when missing (offline: debootstrap + docker import)."""
    from sandbox.base_image import ensure_base_image

    ensure_base_image(docker_client=docker_client)
    return BASE_IMAGE


@pytest.fixture(scope="module")
def shared_sandbox(base_image):
    """One sandbox per test module for tests that do not care about fresh state."""
    with Sandbox.start(SandboxConfig(memory="512m")) as sb:
        yield sb


@pytest.fixture
def sandbox(base_image):
    """A fresh sandbox for tests that change or break it."""
    with Sandbox.start(SandboxConfig(memory="256m", pids_limit=128)) as sb:
        yield sb
