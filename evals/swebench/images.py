"""The per-instance image, as swebench's harness names it: pulled when the engine can, else built.

Order (`[swebench] pull`): `never` builds; `missing` uses a local image, else pulls
`<namespace>/sweb.eval.x86_64.<id>:latest`, else builds (noting why the pull failed); `always` pulls
and fails with the image's name when it cannot. Builds follow swebench's own chain: base image
(`sweb.base.<lang>.<arch>`), environment image (`sweb.env.*`, its setup_env.sh) and instance image
(`sweb.eval.x86_64.<id>`, its setup_repo.sh), each skipped when present, with network during the
build only. With `offline_substitute` the base is the explicit substitute of offline_base.py and
every tag is `horizon-offline`, never the published `latest`.
"""

from __future__ import annotations

import hashlib
import logging
import tempfile
import threading
import time
from pathlib import Path

from swebench.harness.test_spec.test_spec import TestSpec

from evals.images import ImageUnavailable
from evals.swebench.config import SwebenchConfig
from evals.swebench.offline_base import NOT_COMPARABLE, standin_files, substitute_base_dockerfile
from evals.swebench.repo_source import RepoSource
from evals.swebench.specs import published_image
from sandbox.errors import ImageNotFound
from sandbox.images import build_image

log = logging.getLogger("evals.swebench.images")
LABEL = "dev.horizon.swebench"
_locks: dict[str, threading.Lock] = {}
_guard = threading.Lock()


def _lock(tag: str) -> threading.Lock:
    with _guard:
        return _locks.setdefault(tag, threading.Lock())


def _present(client, name: str) -> bool:
    import docker

    try:
        client.images.get(name)
        return True
    except docker.errors.ImageNotFound:
        return False


def _recipe(client, name: str) -> str | None:
    """The recipe label of a present image; "published" for one not built here (pulled, or built by
    swebench's own harness), None when absent."""
    import docker

    try:
        labels = client.images.get(name).attrs.get("Config", {}).get("Labels") or {}
    except docker.errors.ImageNotFound:
        return None
    return labels.get(f"{LABEL}.recipe", "published")


def _pull_error(exc: Exception) -> str:
    """The engine's own words for a failed pull (its APIError wraps them in the request's URL)."""
    text = getattr(exc, "explanation", None) or str(exc).strip() or type(exc).__name__
    return str(text).splitlines()[0][:300]


def pull(client, name: str) -> None:
    repository, _, tag = name.rpartition(":")
    client.images.pull(repository, tag=tag or "latest")


class _Chain:
    """Builds base -> env -> instance for one TestSpec on one engine."""

    def __init__(self, client, spec: TestSpec, source: RepoSource, config: SwebenchConfig, deadline: float):
        self.client, self.spec, self.source, self.config, self.deadline = client, spec, source, config, deadline

    def _build(self, tag: str, dockerfile: str, files: dict[str, str], stage_source: bool = False) -> None:
        # Tags name instances, not contents: the recipe label says whether a present image is this one.
        recipe = hashlib.sha256("\0".join([dockerfile, *(f"{k}\0{v}" for k, v in sorted(files.items()))]).encode()).hexdigest()[:24]
        with _lock(tag):
            if _recipe(self.client, tag) in (recipe, "published"):
                return
            with tempfile.TemporaryDirectory(prefix="horizon-sweb-") as tmp:
                ctx = Path(tmp)
                for name, text in files.items():
                    (ctx / name).parent.mkdir(parents=True, exist_ok=True)
                    (ctx / name).write_text(text, encoding="utf-8")
                if stage_source:
                    self.source.stage(ctx / "repo-source")
                (ctx / "Dockerfile").write_text(dockerfile, encoding="utf-8")
                log.info("building %s", tag)
                substituted = self.config.substitute_base if self.config.offline_substitute else ""
                build_image(ctx, tag, docker_client=self.client, timeout=max(1.0, self.deadline - time.monotonic()),
                            labels={LABEL: self.spec.instance_id, f"{LABEL}.substitute": substituted,
                                    f"{LABEL}.recipe": recipe})

    def base(self) -> None:
        spec = self.spec
        if self.config.offline_substitute:
            self._build(spec.base_image_key, substitute_base_dockerfile(spec.base_dockerfile, self.config.substitute_base),
                        standin_files())
            return
        first = next(line for line in spec.base_dockerfile.splitlines() if line.strip().upper().startswith("FROM"))
        upstream = first.split()[-1]
        if not _present(self.client, upstream) and self.config.pull != "never":
            try:
                pull(self.client, upstream)
            except Exception as exc:  # no registry: said below, with what to do about it
                log.warning("cannot pull %s: %s", upstream, exc)
        try:
            self._build(spec.base_image_key, spec.base_dockerfile, {})
        except ImageNotFound as exc:
            raise ImageUnavailable(
                f"building {spec.base_image_key} needs {upstream}, which is neither local nor pullable ({exc}); "
                f"set [swebench] offline_substitute = true to build on {self.config.substitute_base} "
                "(the score is then not comparable)") from exc

    def env(self) -> None:
        self._build(self.spec.env_image_key, self.spec.env_dockerfile, {"setup_env.sh": self.spec.setup_env_script})

    def instance(self) -> None:
        # swebench's instance Dockerfile, with the source copied in just before its setup_repo.sh runs.
        lines = self.spec.instance_dockerfile.splitlines()
        at = next(i for i, line in enumerate(lines) if "setup_repo.sh" in line)
        if not self.source.is_remote:
            lines.insert(at, "COPY ./repo-source /root/repo-source")
        self._build(self.spec.instance_image_key, "\n".join(lines) + "\n",
                    {"setup_repo.sh": self.spec.install_repo_script}, stage_source=not self.source.is_remote)


def ensure_instance_image(client, spec: TestSpec, source: RepoSource, config: SwebenchConfig,
                          timeout: float) -> tuple[str, list[str]]:
    """The tag to run `spec`'s instance in, and notes for the result (pull fallback, substitution)."""
    deadline = time.monotonic() + timeout
    notes: list[str] = []
    published = published_image(spec, config.namespace)
    if config.pull == "always":  # the published image or nothing (no build, no substitute)
        try:
            pull(client, published)
            return published, [f"pulled {published}"]
        except Exception as exc:
            raise ImageUnavailable(f"pull always: cannot pull {published}: {_pull_error(exc)}") from exc
    if config.offline_substitute:
        notes.append(NOT_COMPARABLE.format(base=config.substitute_base))
    else:
        for name in (published, spec.instance_image_key):
            if _present(client, name):
                return name, notes
        if config.pull != "never":
            try:
                pull(client, published)
                return published, notes + [f"pulled {published}"]
            except Exception as exc:
                notes.append(f"could not pull {published} ({_pull_error(exc)}); building it from swebench's image specs")
    chain = _Chain(client, spec, source, config, deadline)
    try:
        chain.base()
    except ImageUnavailable as exc:
        raise ImageUnavailable("; ".join(notes + [str(exc)])) from exc  # the pull's failure too
    chain.env()
    chain.instance()
    return spec.instance_image_key, notes


def ensure_task_image(task, client, timeout: float) -> tuple[str, list[str]]:
    """The image of a SWE-bench task (its verifier holds the instance, source and config)."""
    from evals.swebench.specs import spec_for_instance

    v = task.verifier
    source = RepoSource(v.source)
    spec = spec_for_instance(dict(v.instance), source, substitute=v.config.offline_substitute)
    return ensure_instance_image(client, spec, source, v.config, timeout)
