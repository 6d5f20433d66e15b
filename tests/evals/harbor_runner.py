"""An image that runs the real `harbor` CLI (PyPI `harbor`, which needs Python >= 3.12) against this
host's Docker engine: Debian trixie (python3.13, docker CLI, docker compose v2) built offline with
debootstrap like the Horizon base, with `harbor` installed from PyPI on first use."""

from __future__ import annotations

import os
from pathlib import Path

from sandbox.base_recipe import BaseRecipe
from sandbox.constants import cache_dir

RUNNER_IMAGE = "horizon-test/harbor-runner:trixie"
PACKAGES = ("bash coreutils python3 python3-venv python3-pip docker-cli docker-compose git curl ca-certificates "
            "tmux").split()
POST_INSTALL = """#!/bin/sh
set -eu
echo 'deb http://deb.debian.org/debian trixie main' > /etc/apt/sources.list
rm -f /etc/hostname /etc/resolv.conf
apt-get clean
rm -rf /var/lib/apt/lists/* /usr/share/doc/* /usr/share/man/*
"""


def runner_recipe() -> BaseRecipe:
    return BaseRecipe(suite="trixie", packages=tuple(PACKAGES), post_install=POST_INSTALL,
                      import_changes=("ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
                                      "ENV LANG=C.UTF-8", 'CMD ["/bin/bash"]'))


def ensure_runner_image(client) -> str:
    """Build (once) the trixie image; its own cache folder keeps the base image's tarballs untouched."""
    from sandbox.base_image import ensure_base_image

    old = os.environ.get("HORIZON_CACHE_DIR")
    os.environ["HORIZON_CACHE_DIR"] = str(Path(cache_dir()) / "harbor-runner")
    try:
        ensure_base_image(tag=RUNNER_IMAGE, recipe=runner_recipe(), docker_client=client)
    finally:
        if old is None:
            os.environ.pop("HORIZON_CACHE_DIR", None)
        else:
            os.environ["HORIZON_CACHE_DIR"] = old
    return RUNNER_IMAGE


if __name__ == "__main__":
    from sandbox.docker_client import connect

    print(ensure_runner_image(connect()))


HARBOR_VERSION = "0.26.0"
HARBOR_IMAGE = f"horizon-test/harbor-runner:harbor-{HARBOR_VERSION}"
HOST_CA = "/etc/ssl/certs/ca-certificates.crt"


def ensure_harbor_image(client) -> str:
    """The runner with `harbor` from PyPI in /opt/harbor (the engine's network reaches PyPI)."""
    import docker

    try:
        client.images.get(HARBOR_IMAGE)
        return HARBOR_IMAGE
    except docker.errors.ImageNotFound:
        pass
    base = ensure_runner_image(client)
    container = client.containers.run(
        base, ["sh", "-c", f"python3 -m venv /opt/harbor && /opt/harbor/bin/pip install -q harbor=={HARBOR_VERSION}"],
        detach=True, network_mode="bridge", environment={"PIP_CERT": "/etc/ssl/certs/host-ca.crt"},
        volumes={HOST_CA: {"bind": "/etc/ssl/certs/host-ca.crt", "mode": "ro"}})
    try:
        status = container.wait(timeout=900)
        if status.get("StatusCode") != 0:
            raise RuntimeError(f"pip install harbor failed: {container.logs().decode()[-2000:]}")
        repo, _, tag = HARBOR_IMAGE.rpartition(":")
        container.commit(repository=repo, tag=tag)
    finally:
        container.remove(force=True)
    return HARBOR_IMAGE


def harbor_run(client, project: Path, work: Path, args: list[str], timeout: int = 900) -> str:
    """`harbor ARGS` in the runner, on this host's engine: `work` and the project at their own paths
    (Harbor bind-mounts trial folders by host path), the wheelhouse cache kept between runs."""
    image = ensure_harbor_image(client)
    cache = Path(cache_dir()) / "harbor-wheelhouse"
    cache.mkdir(parents=True, exist_ok=True)
    container = client.containers.run(
        image, ["/opt/harbor/bin/harbor", *args], detach=True, network_mode="bridge", working_dir=str(work),
        environment={"PYTHONPATH": str(project), "PIP_CERT": "/etc/ssl/certs/host-ca.crt", "COLUMNS": "160"},
        volumes={"/var/run/docker.sock": {"bind": "/var/run/docker.sock", "mode": "rw"},
                 str(work): {"bind": str(work), "mode": "rw"}, str(project): {"bind": str(project), "mode": "ro"},
                 HOST_CA: {"bind": "/etc/ssl/certs/host-ca.crt", "mode": "ro"},
                 str(cache): {"bind": "/root/.cache/horizon/harbor-wheelhouse", "mode": "rw"}})
    try:
        status = container.wait(timeout=timeout)
        logs = container.logs().decode(errors="replace")
        if status.get("StatusCode") != 0:
            raise RuntimeError(f"harbor {' '.join(args)} exited {status.get('StatusCode')}:\n{logs[-3000:]}")
        return logs
    finally:
        container.remove(force=True)
