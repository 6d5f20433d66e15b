"""Task images: assemble the build context, map unpullable base images, build once per content hash.

Nothing is ever pulled here, yet real task Dockerfiles start `FROM` Docker Hub or GHCR images
(`ghcr.io/laude-institute/t-bench/python-3-13`, `python:3.13-slim-bookworm`, `ubuntu:24.04`...).
`ImageMap` rewrites such FROM lines to a local image built from the Horizon base — the default
mapping below, overridable in the eval config's `[images]` table (pattern = target, fnmatch-style,
first match wins, an empty target disables a default). Every substitution is logged as a warning
and recorded in the trial's result, because a task may behave differently on another base.
"""

from __future__ import annotations

import fnmatch
import hashlib
import logging
import re
import shutil
import tempfile
import threading
from dataclasses import dataclass, field
from pathlib import Path

from sandbox import BASE_IMAGE
from sandbox.images import build_image

log = logging.getLogger("evals.images")

DEFAULT_IMAGE_MAP: dict[str, str] = {
    "ghcr.io/laude-institute/t-bench/*": BASE_IMAGE,
    "python:*": BASE_IMAGE,
    "ubuntu:*": BASE_IMAGE,
    "debian:*": BASE_IMAGE,
    "buildpack-deps:*": BASE_IMAGE,
}
_FROM = re.compile(r"^(\s*FROM\s+(?:--platform=\S+\s+)?)(\S+)(.*)$", re.I)


class ImageUnavailable(RuntimeError):
    """A prebuilt image is missing locally and no mapping applies: an infrastructure error."""


@dataclass(frozen=True)
class ImageMap:
    rules: dict[str, str] = field(default_factory=lambda: dict(DEFAULT_IMAGE_MAP))

    @classmethod
    def with_overrides(cls, overrides: dict[str, str]) -> "ImageMap":
        rules = {**overrides, **{k: v for k, v in DEFAULT_IMAGE_MAP.items() if k not in overrides}}
        return cls({k: v for k, v in rules.items() if v})

    def target(self, image: str) -> str | None:
        for pattern, target in self.rules.items():
            if fnmatch.fnmatchcase(image, pattern) or fnmatch.fnmatchcase(image.split("@")[0], pattern):
                return target
        return None


def rewrite_from_lines(dockerfile: str, image_map: ImageMap, available) -> tuple[str, list[str]]:
    """Replace FROM images that are not `available(image)` but have a mapping; return notes."""
    stages: set[str] = set()
    notes: list[str] = []
    lines = dockerfile.splitlines()
    for i, line in enumerate(lines):
        m = _FROM.match(line)
        if not m:
            continue
        image, rest = m.group(2), m.group(3)
        alias = re.search(r"\bAS\s+(\S+)", rest, re.I)
        if image not in stages and image.lower() != "scratch" and not available(image):
            target = image_map.target(image)
            if target and target != image:
                lines[i] = f"{m.group(1)}{target}{rest}"
                notes.append(f"base image {image} is not available offline; substituted {target}")
        if alias:
            stages.add(alias.group(1))
    return "\n".join(lines) + "\n", notes


def _assemble(spec, dest: Path) -> None:
    if spec.context_dir is not None:
        shutil.copytree(spec.context_dir, dest, dirs_exist_ok=True, symlinks=True)
    for name, src in spec.copy_files.items():
        target = dest / name
        target.parent.mkdir(parents=True, exist_ok=True)
        if Path(src).is_dir():
            shutil.copytree(src, target, dirs_exist_ok=True, symlinks=True)
        else:
            shutil.copy2(src, target)
    for name, text in spec.generated_files.items():
        (dest / name).parent.mkdir(parents=True, exist_ok=True)
        (dest / name).write_text(text, encoding="utf-8")


def _context_hash(root: Path, base_ids: list[str]) -> str:
    digest = hashlib.sha256("\0".join(base_ids).encode())
    for path in sorted(p for p in root.rglob("*") if p.is_file()):
        digest.update(str(path.relative_to(root)).encode() + b"\0")
        digest.update(hashlib.sha256(path.read_bytes()).digest())
    return digest.hexdigest()[:16]


class ImageBuilder:
    """Builds (or finds) the image for an `ImageSpec` on one Docker engine, once per content hash."""

    def __init__(self, docker_client, image_map: ImageMap | None = None):
        self.client = docker_client
        self.image_map = image_map or ImageMap()
        self._locks: dict[str, threading.Lock] = {}
        self._guard = threading.Lock()

    def _available(self, image: str) -> bool:
        import docker

        try:
            self.client.images.get(image)
            return True
        except docker.errors.ImageNotFound:
            return False

    def _base_ids(self, dockerfile: str) -> list[str]:
        """Ids of the FROM images, so a rebuilt base image also rebuilds the task images on it."""
        ids = []
        for line in dockerfile.splitlines():
            m = _FROM.match(line)
            if m and self._available(m.group(2)):
                ids.append(self.client.images.get(m.group(2)).id)
        return ids

    def ensure(self, spec, name: str, timeout: float | None = None) -> tuple[str, list[str]]:
        """The tag of an image for `spec`, building it when needed, and the substitution notes. A build
        past `timeout` seconds is stopped on the engine and raises ImageBuildTimeout."""
        if spec.prebuilt:
            if self._available(spec.image):
                return spec.image, []
            raise ImageUnavailable(f"image {spec.image!r} is not present locally and images are never pulled")
        with tempfile.TemporaryDirectory(prefix="horizon-ctx-") as tmp:
            ctx = Path(tmp)
            _assemble(spec, ctx)
            dockerfile = ctx / spec.dockerfile
            if not dockerfile.is_file():
                raise FileNotFoundError(f"{spec.dockerfile} missing from the build context of {name}")
            text, notes = rewrite_from_lines(dockerfile.read_text(encoding="utf-8"), self.image_map, self._available)
            dockerfile.write_text(text, encoding="utf-8")
            for note in notes:
                log.warning("%s: %s", name, note)
            slug = re.sub(r"[^a-z0-9_.-]+", "-", name.lower()).strip("-.")[:100] or "task"
            tag = f"horizon-eval/{slug}:{_context_hash(ctx, self._base_ids(text))}"
            with self._guard:
                lock = self._locks.setdefault(tag, threading.Lock())
            with lock:
                if not self._available(tag):
                    build_image(ctx, tag, dockerfile=spec.dockerfile, docker_client=self.client, timeout=timeout)
            return tag, notes
