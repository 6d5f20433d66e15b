"""Connecting to a Docker engine, with a clear error when none answers."""

from __future__ import annotations

from sandbox.errors import DaemonUnavailable


def connect(docker_host: str | None = None, timeout: int = 120):
    """A docker.DockerClient for `docker_host` (None: the environment's, like the docker CLI)."""
    import docker

    where = docker_host or "the default Docker socket ($DOCKER_HOST or /var/run/docker.sock)"
    try:
        client = docker.DockerClient(base_url=docker_host, timeout=timeout) if docker_host else docker.from_env(timeout=timeout)
        client.ping()
    except Exception as exc:
        raise DaemonUnavailable(
            f"no Docker engine answers at {where}: {exc}. Start one (scripts/setup.sh does) "
            "or use LocalSandbox, which runs on the host without isolation."
        ) from exc
    return client
