"""Task images: assemble the build context, resolve base images by the run's `ImagePolicy`, build
once per content hash.

A spec names a prebuilt image (`ImageSpec.image`), a build context, or both (a Harbor task whose
`docker_image` is used as is, with environment/Dockerfile built only when that image cannot be had,
Harbor's own fallback). Every `FROM` image of a Dockerfile is resolved first (local, pulled, or
with `--offline-substitute` rewritten to the Horizon base, see evals/image_policy.py), so a build
never stalls on a registry and an unavailable base is reported by name before anything is built.
"""

from __future__ import annotations

import hashlib
import logging
import re
import shutil
import tempfile
import threading
from pathlib import Path

from evals.image_policy import (
    DEFAULT_IMAGE_MAP,
    ImageMap,
    ImagePolicy,
    ImagePullFailed,
    ImageResolution,
    ImageUnavailable,
    built_resolution,
    is_local,
    resolve_image,
)
from sandbox.images import build_image

log = logging.getLogger("evals.images")

_FROM = re.compile(r"^(\s*FROM\s+(?:--platform=\S+\s+)?)(\S+)(.*)$", re.I)

__all__ = ["DEFAULT_IMAGE_MAP", "ImageBuilder", "ImageMap", "ImageUnavailable", "rewrite_from_lines"]


def rewrite_from_lines(dockerfile: str, image_map: ImageMap, available) -> tuple[str, list[str]]:
    """Replace FROM images that are not `available(image)` but have a mapping; return notes.
    (The offline substitution rule alone; `ImageBuilder` applies it only under the policy.)"""
    def substitute(image: str) -> ImageResolution | None:
        if available(image):
            return None
        target = image_map.target(image)
        if not target or target == image:
            return None
        return ImageResolution(image, target, "substituted", False,
                               (f"base image {image} is not available offline; substituted {target}",))

    text, resolutions = _map_from_lines(dockerfile, substitute)
    return text, [n for r in resolutions for n in r.notes]


def _map_from_lines(dockerfile: str, resolve) -> tuple[str, list[ImageResolution]]:
    """Apply `resolve(image) -> ImageResolution | None` to every external FROM image."""
    stages: set[str] = set()
    resolutions: list[ImageResolution] = []
    lines = dockerfile.splitlines()
    for i, line in enumerate(lines):
        m = _FROM.match(line)
        if not m:
            continue
        image, rest = m.group(2), m.group(3)
        alias = re.search(r"\bAS\s+(\S+)", rest, re.I)
        if image not in stages and image.lower() != "scratch" and "$" not in image:
            r = resolve(image)
            if r is not None:
                resolutions.append(r)
                if r.tag != image:
                    lines[i] = f"{m.group(1)}{r.tag}{rest}"
        if alias:
            stages.add(alias.group(1))
    return "\n".join(lines) + "\n", resolutions


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
    """Finds, pulls or builds the image for an `ImageSpec` on one Docker engine, once per content hash."""

    def __init__(self, docker_client, image_map: ImageMap | None = None, policy: ImagePolicy | None = None):
        self.client = docker_client
        self.image_map = image_map or ImageMap()
        self.policy = policy or ImagePolicy()
        self._locks: dict[str, threading.Lock] = {}
        self._guard = threading.Lock()

    def _available(self, image: str) -> bool:
        return is_local(self.client, image)

    def ensure(self, spec, name: str, timeout: float | None = None) -> tuple[str, list[str]]:
        """(tag, notes) for `spec`; see ensure_image for the full account."""
        resolved = self.ensure_image(spec, name, timeout)
        return resolved[-1].tag, [n for r in resolved for n in r.notes]

    def ensure_image(self, spec, name: str, timeout: float | None = None) -> list[ImageResolution]:
        """How every image of `spec` was obtained; the last entry is the image to run. A build past
        `timeout` seconds is stopped on the engine and raises ImageBuildTimeout; an image that
        cannot be had raises ImageUnavailable (ImagePullFailed under `--pull always`)."""
        if spec.image is not None:
            has_dockerfile = spec.context_dir is not None and (spec.context_dir / spec.dockerfile).is_file()
            try:
                return [resolve_image(self.client, spec.image, self.policy, self.image_map,
                                      has_fallback=has_dockerfile)]
            except ImagePullFailed:
                raise  # --pull always: the user asked for the registry's image and nothing else
            except ImageUnavailable as exc:
                if not has_dockerfile:
                    raise
                reason = f"{exc}; falling back to environment/{spec.dockerfile} as Harbor does"
                log.warning("%s: %s", name, reason)
                built = self._build(spec, name, timeout)
                return built[:-1] + [built_resolution(spec.image, built[-1].tag, reason)]
        return self._build(spec, name, timeout)

    def _build(self, spec, name: str, timeout: float | None) -> list[ImageResolution]:
        with tempfile.TemporaryDirectory(prefix="horizon-ctx-") as tmp:
            ctx = Path(tmp)
            _assemble(spec, ctx)
            dockerfile = ctx / spec.dockerfile
            if not dockerfile.is_file():
                raise FileNotFoundError(f"{spec.dockerfile} missing from the build context of {name}")
            text, bases = _map_from_lines(
                dockerfile.read_text(encoding="utf-8"),
                lambda image: resolve_image(self.client, image, self.policy, self.image_map))
            dockerfile.write_text(text, encoding="utf-8")
            base_ids = [self.client.images.get(r.tag).id for r in bases]
            slug = re.sub(r"[^a-z0-9_.-]+", "-", name.lower()).strip("-.")[:100] or "task"
            tag = f"horizon-eval/{slug}:{_context_hash(ctx, base_ids)}"
            with self._guard:
                lock = self._locks.setdefault(tag, threading.Lock())
            with lock:
                if not self._available(tag):
                    build_image(ctx, tag, dockerfile=spec.dockerfile, docker_client=self.client, timeout=timeout)
            comparable = all(r.comparable for r in bases)
            return bases + [ImageResolution(name, tag, "built", comparable)]
