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


def labelled_containers(client, labels: list[str], *, include_stopped: bool = True) -> list[dict]:
    """Summaries (`docker ps` rows: Id, Names, Labels, Created) of the containers carrying every label.

    NOTE: the low-level listing, not `client.containers.list`: that inspects each container after
    listing, and a container that removes itself in between (an auto-removed sandbox whose owner
    was just killed) turns the whole listing into a NotFound error.
    """
    return client.api.containers(all=include_stopped, filters={"label": labels})


def remove_container(client, container_id: str) -> bool:
    """Force-remove a container; False when it is already gone or another caller is removing it."""
    import docker

    try:
        client.api.remove_container(container_id, force=True, v=True)
    except docker.errors.NotFound:
        return False
    except docker.errors.APIError as exc:
        if exc.status_code == 409:  # "removal of container ... is already in progress"
            return False
        raise
    return True
