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
