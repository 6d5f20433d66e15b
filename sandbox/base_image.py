"""Builds the base sandbox image offline: debootstrap Debian, run the recipe, `docker import`.

Two caches keep rebuilds fast: the downloaded .deb tarball (keyed by the package list) and the
finished root file-system tarball (keyed by the whole recipe). With both present a rebuild is a
`docker import` of a local file; with the image already tagged and labelled with the recipe
hash, nothing is done at all.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from sandbox.base_recipe import BaseRecipe, host_debian_mirror
from sandbox.constants import BASE_IMAGE, RECIPE_LABEL_KEY, cache_dir
from sandbox.docker_client import connect
from sandbox.errors import ImageBuildError


@dataclass(frozen=True)
class BaseImageResult:
    tag: str
    image_id: str
    recipe_digest: str
    action: str  # "reused" | "imported" (from cached rootfs) | "built"


def base_image_status(client, tag: str = BASE_IMAGE, recipe: BaseRecipe | None = None) -> str:
    """'current', 'stale' (recipe changed) or 'missing'."""
    import docker

    recipe = recipe or BaseRecipe()
    try:
        image = client.images.get(tag)
    except docker.errors.ImageNotFound:
        return "missing"
    labels = image.labels or {}
    return "current" if labels.get(RECIPE_LABEL_KEY) == recipe.digest() else "stale"


def ensure_base_image(
    *,
    force: bool = False,
    tag: str = BASE_IMAGE,
    recipe: BaseRecipe | None = None,
    docker_client=None,
    log: Callable[[str], None] = lambda _msg: None,
) -> BaseImageResult:
    """Make sure `tag` holds an image built from `recipe`; build or import it when it does not."""
    recipe = recipe or BaseRecipe()
    client = docker_client or connect()
    digest = recipe.digest()
    if not force and base_image_status(client, tag, recipe) == "current":
        image = client.images.get(tag)
        log(f"{tag} is up to date (recipe {digest})")
        return BaseImageResult(tag, image.id, digest, "reused")

    cache = Path(cache_dir()) / "base-image"
    cache.mkdir(parents=True, exist_ok=True)
    # Several engineers/CI jobs may build at once; one builds, the others wait and reuse.
    with open(cache / "build.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not force and base_image_status(client, tag, recipe) == "current":
            return BaseImageResult(tag, client.images.get(tag).id, digest, "reused")
        rootfs = cache / f"rootfs-{digest}.tar"
        action = "imported"
        if force or not rootfs.exists():
            _build_rootfs(recipe, cache, rootfs, log)
            action = "built"
        log(f"docker import {rootfs.name} as {tag}")
        repository, _, image_tag = tag.rpartition(":")
        changes = [*recipe.import_changes, f"LABEL {RECIPE_LABEL_KEY}={digest}"]
        client.api.import_image_from_file(str(rootfs), repository=repository, tag=image_tag, changes=changes)
        image = client.images.get(tag)
        if (image.labels or {}).get(RECIPE_LABEL_KEY) != digest:
            raise ImageBuildError(f"imported {tag} but it lacks the recipe label {digest}")
        _prune_old_tarballs(cache, keep={rootfs.name, f"debs-{recipe.packages_digest()}.tgz"})
        log(f"{tag} ready ({image.short_id}, recipe {digest})")
        return BaseImageResult(tag, image.id, digest, action)


def _build_rootfs(recipe: BaseRecipe, cache: Path, out: Path, log: Callable[[str], None]) -> None:
    if os.geteuid() != 0:
        raise ImageBuildError("building the base image needs root (debootstrap creates device files and chroots)")
    debootstrap = shutil.which("debootstrap") or ("/usr/sbin/debootstrap" if Path("/usr/sbin/debootstrap").exists() else None)
    if not debootstrap:
        raise ImageBuildError("debootstrap is not installed (apt-get install debootstrap, or run scripts/setup.sh)")
    mirror = host_debian_mirror(recipe.suite)
    debs = cache / f"debs-{recipe.packages_digest()}.tgz"
    common = [debootstrap, f"--variant={recipe.variant}", "--include=" + ",".join(recipe.packages)]
    logfile = cache / "debootstrap.log"
    with tempfile.TemporaryDirectory(prefix="horizon-rootfs-", dir=cache) as work:
        target = Path(work) / "root"
        if not debs.exists():
            log(f"downloading {len(recipe.packages)} packages and their dependencies from {mirror}")
            partial = debs.with_suffix(".partial.tgz")
            _run([*common, f"--make-tarball={partial}", recipe.suite, str(Path(work) / "dl"), mirror], logfile)
            partial.rename(debs)
        log(f"installing Debian {recipe.suite} into a fresh root (debootstrap, a few minutes)")
        _run([*common, f"--unpack-tarball={debs}", recipe.suite, str(target), mirror], logfile)
        script = target / "tmp" / "horizon-post-install.sh"
        script.write_text(recipe.post_install, encoding="utf-8")
        _run(["chroot", str(target), "/bin/sh", "/tmp/horizon-post-install.sh"], logfile)
        script.unlink(missing_ok=True)
        log("packing the root file system")
        partial = out.with_suffix(".partial.tar")
        # /dev, /proc and /sys are provided by the container runtime; ship them empty.
        _run(["tar", "--numeric-owner", "--xattrs", "-C", str(target), "-cf", str(partial),
              "--exclude=./dev/*", "--exclude=./proc/*", "--exclude=./sys/*", "."], logfile)
        partial.rename(out)


def _run(cmd: list[str], logfile: Path) -> None:
    with open(logfile, "ab") as fh:
        fh.write(("\n$ " + " ".join(cmd) + "\n").encode())
        fh.flush()
        proc = subprocess.run(cmd, stdout=fh, stderr=subprocess.STDOUT, check=False)
    if proc.returncode != 0:
        tail = logfile.read_bytes()[-3000:].decode("utf-8", "replace")
        raise ImageBuildError(f"{cmd[0]} failed with exit code {proc.returncode} (log: {logfile}):\n{tail}")


def _prune_old_tarballs(cache: Path, keep: set[str]) -> None:
    for path in cache.glob("*.t*"):
        if path.name not in keep and (path.name.startswith("rootfs-") or path.name.startswith("debs-")):
            path.unlink(missing_ok=True)
