"""Where a task's images come from: used as present, pulled, built, or (offline, opt-in) substituted.

    policy = ImagePolicy(pull="missing", offline_substitute=False)      # the default
    r = resolve_image(client, "python:3.13-slim-bookworm", policy)     # -> ImageResolution
    r.tag, r.source, r.comparable, r.notes

`pull` follows `docker compose --pull`'s vocabulary:
- `always`: every image is pulled; a failed pull is `ImagePullFailed` naming the image (no fallback).
- `missing` (default): a local image is used as is; a missing one is pulled; if that fails the
  caller's fallback applies (a Harbor task's environment/Dockerfile is built; a base image is
  substituted when `offline_substitute` is on), else `ImageUnavailable`.
- `never`: only local images; a missing one goes straight to the fallback.

Substitution (a missing `python:*`, `ubuntu:*`, `debian:*`, t-bench... image replaced by the Horizon
base, see `ImageMap`) runs the task on another distribution, so its score is not comparable to a
leaderboard's: every resolution says `comparable`, and the runner marks each result row and the
summary. Building from a Dockerfile because a prebuilt image could not be had keeps the task's own
definition, so it stays comparable, but it is reported as a fallback.

The resolution is per Docker engine (`client`); pulls of one image are serialised per process.
"""

from __future__ import annotations

import fnmatch
import logging
import threading
from dataclasses import dataclass, field
from typing import Literal

from pydantic import BaseModel, ConfigDict

from sandbox import BASE_IMAGE

log = logging.getLogger("evals.image_policy")

PullMode = Literal["always", "missing", "never"]
ImageSource = Literal["local", "pulled", "built", "substituted"]

DEFAULT_IMAGE_MAP: dict[str, str] = {
    "ghcr.io/laude-institute/t-bench/*": BASE_IMAGE,
    "python:*": BASE_IMAGE,
    "ubuntu:*": BASE_IMAGE,
    "debian:*": BASE_IMAGE,
    "buildpack-deps:*": BASE_IMAGE,
}


class ImagePolicy(BaseModel):
    """How images are obtained for a run (`--pull`, `--offline-substitute`, or the eval config)."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    pull: PullMode = "missing"
    offline_substitute: bool = False


class ImageUnavailable(RuntimeError):
    """An image could not be obtained (not local, not pullable, no fallback allowed): an
    infrastructure error that a retry cannot fix."""

    def __init__(self, message: str, *, image: str | None = None):
        super().__init__(message)
        self.image = image  # the image reference that could not be had


class ImagePullFailed(ImageUnavailable):
    """`--pull always` (or a required pull) failed: the registry's answer names why."""


@dataclass(frozen=True)
class ImageMap:
    """Base-image substitutions for offline runs: fnmatch pattern -> local image, first match wins."""

    rules: dict[str, str] = field(default_factory=lambda: dict(DEFAULT_IMAGE_MAP))

    @classmethod
    def with_overrides(cls, overrides: dict[str, str]) -> "ImageMap":
        """The config's `[images]` table over the defaults; an empty target disables a default."""
        rules = {**overrides, **{k: v for k, v in DEFAULT_IMAGE_MAP.items() if k not in overrides}}
        return cls({k: v for k, v in rules.items() if v})

    def target(self, image: str) -> str | None:
        for pattern, target in self.rules.items():
            if fnmatch.fnmatchcase(image, pattern) or fnmatch.fnmatchcase(image.split("@")[0], pattern):
                return target
        return None


@dataclass(frozen=True)
class ImageResolution:
    """What `requested` became on this engine: the local `tag` to run, and how it got there."""

    requested: str
    tag: str
    source: ImageSource
    comparable: bool = True  # False: substituted, so the score is not comparable to a leaderboard's
    notes: tuple[str, ...] = ()

    def record(self) -> dict:
        """The form kept in a result row (`TrialResult.images`)."""
        return {"requested": self.requested, "tag": self.tag, "source": self.source, "comparable": self.comparable}


def built_resolution(requested: str, tag: str, reason: str | None = None) -> ImageResolution:
    """A resolution for an image built from the task's own Dockerfile (`reason`: why not pulled)."""
    notes = (f"built {tag} from the task's Dockerfile: {reason}",) if reason else ()
    return ImageResolution(requested=requested, tag=tag, source="built", comparable=True, notes=notes)


_pull_locks: dict[str, threading.Lock] = {}
_pull_guard = threading.Lock()


def is_local(client, image: str) -> bool:
    import docker

    try:
        client.images.get(image)
        return True
    except docker.errors.ImageNotFound:
        return False


def pull_image(client, image: str) -> None:
    """Pull `image` (a missing tag means `latest`); ImagePullFailed with the engine's reason."""
    import docker

    with _pull_guard:
        lock = _pull_locks.setdefault(image, threading.Lock())
    with lock:
        try:
            client.images.pull(image)
        except (docker.errors.APIError, docker.errors.DockerException) as exc:
            reason = getattr(exc, "explanation", None) or str(exc)
            raise ImagePullFailed(image=image, message=f"pulling image {image!r} failed: {reason}") from None
        except Exception as exc:  # connection drops and timeouts surface as requests' errors
            raise ImagePullFailed(image=image, message=f"pulling image {image!r} failed: {type(exc).__name__}: {exc}") from None


def resolve_image(client, image: str, policy: ImagePolicy, image_map: ImageMap | None = None,
                  *, has_fallback: bool = False) -> ImageResolution:
    """The local tag for `image` under `policy`.

    `has_fallback`: the caller can build the image itself (a Harbor `docker_image` whose task also
    ships environment/Dockerfile); then a missing image raises ImageUnavailable for the caller to
    catch and build instead of being substituted. Raises ImagePullFailed under `pull = "always"`.
    """
    if policy.pull == "always":
        pull_image(client, image)
        log.info("pulled %s", image)
        return ImageResolution(image, image, "pulled")
    if is_local(client, image):
        return ImageResolution(image, image, "local")
    failure = f"image {image!r} is not present locally"
    if policy.pull == "missing":
        try:
            pull_image(client, image)
            return ImageResolution(image, image, "pulled", notes=(f"pulled {image}",))
        except ImagePullFailed as exc:
            failure = f"{failure} and {exc}"
    else:
        failure += " (--pull never)"
    if has_fallback:
        raise ImageUnavailable(image=image, message=failure)
    target = (image_map or ImageMap()).target(image)
    if target and target != image:
        if not policy.offline_substitute:
            raise ImageUnavailable(image=image, message=f"{failure}; pass --offline-substitute to run it on {target} instead "
                                          "(the score is then not comparable)")
        if not is_local(client, target):
            raise ImageUnavailable(image=image, message=f"{failure}, and its offline substitute {target!r} is not present either")
        note = f"base image {image} is not available offline; substituted {target} (score not comparable)"
        log.warning(note)
        return ImageResolution(image, target, "substituted", comparable=False, notes=(note,))
    raise ImageUnavailable(image=image, message=failure)


__all__ = ["DEFAULT_IMAGE_MAP", "ImageMap", "ImagePolicy", "ImagePullFailed", "ImageResolution", "ImageSource",
           "ImageUnavailable", "PullMode", "built_resolution", "is_local", "pull_image", "resolve_image"]
