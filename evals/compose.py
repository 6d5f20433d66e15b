"""Compose environments: a task's environment/docker-compose.yaml services next to its main container.

Harbor merges a task's docker-compose.yaml over its own base file, whose service `main` is the task
image; the other services (a database, a web server...) run beside it. Here the main container is
still the Horizon sandbox (built or pulled by the image policy, with its shell, limits and users);
`docker compose` (the v2 plugin, else Debian's `docker-compose`) runs the other services of the same
file in a project of its own, and the sandbox joins that project's network under the alias `main`,
so every service reaches the others by name, as under Harbor. A task without network gets an
internal project network (no route out; the services still reach each other). `down -v` removes the
project when the trial ends.
"""

from __future__ import annotations

import logging
import os
import re
import shutil
import subprocess
import tempfile
import uuid
from pathlib import Path

import yaml

log = logging.getLogger("evals.compose")

MAIN_SERVICES = ("main", "client")  # Harbor's and Terminal-Bench 1's name for the agent's container
UP_TIMEOUT_SEC = 600.0


class ComposeError(RuntimeError):
    """`docker compose` is missing, or the project's services did not come up."""


def compose_command() -> list[str]:
    docker = shutil.which("docker")
    if docker and subprocess.run([docker, "compose", "version"], capture_output=True).returncode == 0:
        return [docker, "compose"]
    legacy = shutil.which("docker-compose")
    if legacy:
        return [legacy]
    raise ComposeError("compose environments need `docker compose` (the Docker CLI plugin) or `docker-compose` "
                       "(Debian's package; scripts/setup.sh installs it)")


def side_services(compose_file: Path) -> list[str]:
    """The services of `compose_file` other than the main one, in file order."""
    try:
        data = yaml.safe_load(compose_file.read_text(encoding="utf-8")) or {}
    except yaml.YAMLError as exc:
        raise ComposeError(f"{compose_file.name}: invalid YAML: {exc}") from exc
    services = data.get("services") if isinstance(data, dict) else None
    if not isinstance(services, dict):
        raise ComposeError(f"{compose_file.name}: expected a top-level `services` mapping")
    return [name for name in services if name not in MAIN_SERVICES]


class ComposeProject:
    """The side services of one trial: `with ComposeProject(...) as network_name:`."""

    def __init__(self, compose_file: Path, *, main_image: str, internet: bool, docker_host: str | None,
                 pull: str = "missing", label: str = "eval"):
        self.compose_file = compose_file
        self.services = side_services(compose_file)
        self._all_services = list((yaml.safe_load(compose_file.read_text(encoding="utf-8")) or {})["services"])
        self.internet = internet
        self.main_image = main_image
        self.pull = pull
        self.project = re.sub(r"[^a-z0-9_-]", "-", f"hz-{label}-{uuid.uuid4().hex[:8]}".lower())
        self.env = {**os.environ, "CONTEXT_DIR": str(compose_file.parent.resolve()), "MAIN_IMAGE_NAME": main_image,
                    "PREBUILT_IMAGE_NAME": main_image}
        if docker_host:
            self.env["DOCKER_HOST"] = docker_host
        self._tmp: tempfile.TemporaryDirectory | None = None
        self._command = compose_command()

    @property
    def network(self) -> str:
        return f"{self.project}_default"

    def _override(self) -> Path:
        """Our file over the task's: the main service is ours (never started by compose), and the
        default network is internal when the task has no internet."""
        self._tmp = tempfile.TemporaryDirectory(prefix="horizon-compose-")
        # Compose checks every service when it loads the file, the unstarted main one too.
        mains = [name for name in MAIN_SERVICES if name in self._all_services]
        override = {"services": {name: {"image": self.main_image} for name in mains},
                    "networks": {"default": {"internal": not self.internet}}}
        path = Path(self._tmp.name) / "horizon-override.yaml"
        path.write_text(yaml.safe_dump(override), encoding="utf-8")
        return path

    def _run(self, *args: str, timeout: float) -> subprocess.CompletedProcess:
        files = ["-f", str(self.compose_file), "-f", str(self._override_path)]
        return subprocess.run([*self._command, "-p", self.project, *files, *args], env=self.env, cwd=self.compose_file.parent,
                              capture_output=True, text=True, timeout=timeout)

    def __enter__(self) -> str:
        self._override_path = self._override()
        args = ["up", "-d", "--no-deps"]
        if self._command[-1] == "compose" and self.pull in ("always", "missing", "never"):
            args += ["--pull", self.pull]
        try:
            if self.services:
                up = self._run(*args, *self.services, timeout=UP_TIMEOUT_SEC)
            else:  # no side service: the network alone, for the main container to join
                up = subprocess.run(["docker", "network", "create", *(["--internal"] if not self.internet else []),
                                     "--label", f"com.docker.compose.project={self.project}", self.network],
                                    env=self.env, capture_output=True, text=True, timeout=60)
        except subprocess.TimeoutExpired as exc:
            self.__exit__(None, None, None)
            raise ComposeError(f"docker compose up did not finish within {exc.timeout:.0f}s") from None
        if up.returncode != 0:
            self.__exit__(None, None, None)
            raise ComposeError(f"docker compose up {' '.join(self.services)} failed ({up.returncode}): "
                               f"{(up.stderr or up.stdout).strip()[-1500:]}")
        return self.network

    def __exit__(self, *exc) -> None:
        try:
            self._run("down", "-v", "--remove-orphans", "-t", "1", timeout=120)
            subprocess.run(["docker", "network", "rm", self.network], env=self.env, capture_output=True, timeout=60)
        except Exception as err:  # noqa: BLE001 - cleanup must not hide the trial's own result
            log.warning("compose project %s was not fully removed: %s", self.project, err)
        finally:
            if self._tmp is not None:
                self._tmp.cleanup()
