"""Builds task images from Dockerfiles `FROM` the base image, with the Docker SDK.

Network is on during builds only (task containers run with none). Behind a TLS-intercepting
proxy, HTTPS from inside a build (pip, apt over https, curl) fails unless the build trusts the
proxy's CA, so by default the host's extra CA certificates (the ones update-ca-certificates
installed from /usr/local/share/ca-certificates) are copied into each build stage and added to
the stage's trust store. Docker's layer cache keeps that to one cached step per base image.

A build with a `timeout` (or a `cancel` event) really stops. The build containers its log announces
(" ---> Running in <id>") are killed as they appear, which fails the build; if it has not ended a
few seconds later, the request's connection is shut, which makes the engine cancel it. The
containers it announced are then removed before ImageBuildTimeout (naming the image) is raised.
"""

from __future__ import annotations

import json
import os
import re
import socket
import tempfile
import threading
import time
from pathlib import Path

from sandbox.constants import TASK_IMAGE_LABEL_KEY
from sandbox.docker_client import connect
from sandbox.errors import ImageBuildError, ImageNotFound, SandboxTimeout

DEFAULT_HOST_CA_DIR = "/usr/local/share/ca-certificates"
CA_DIR_ENV = "HORIZON_BUILD_CA_DIR"
_CA_IN_CONTEXT = ".horizon-host-ca"
_FROM = re.compile(r"^\s*FROM\s+(?:--platform=\S+\s+)?(\S+)(?:\s+AS\s+(\S+))?\s*$", re.I)
_RUNNING_IN = re.compile(r"^ ---> Running in ([0-9a-f]{12,64})\s*$")
_BUILT = re.compile(r"^Successfully built ([0-9a-f]{12,64})\s*$")
_STOP_GRACE = 5.0  # seconds a stopped build may take to end by itself before its connection is shut
_CLEANUP_WAIT = 30.0  # seconds to wait for a stopped build's containers to be gone


class ImageBuildTimeout(ImageBuildError, SandboxTimeout):
    """A task image build ran past its time limit; it was stopped and its build containers removed."""


def host_ca_certificates(ca_dir: str | os.PathLike | None = None) -> dict[str, str]:
    """{file name: PEM text} of the extra CA certificates to trust in builds.

    `ca_dir` wins, then $HORIZON_BUILD_CA_DIR, then /usr/local/share/ca-certificates.
    """
    root = Path(ca_dir or os.environ.get(CA_DIR_ENV) or DEFAULT_HOST_CA_DIR)
    if not root.is_dir():
        return {}
    certs = {}
    for path in sorted(root.rglob("*.crt")):
        text = path.read_text(encoding="utf-8", errors="replace")
        if "BEGIN CERTIFICATE" in text:
            certs[f"{len(certs):02d}-{path.name}"] = text
    return certs


def build_image(
    context_dir: str | os.PathLike,
    tag: str,
    dockerfile: str = "Dockerfile",
    buildargs: dict[str, str] | None = None,
    trust_host_ca: bool = True,
    docker_client=None,
    *,
    ca_dir: str | os.PathLike | None = None,
    labels: dict[str, str] | None = None,
    timeout: float | None = None,
    cancel: threading.Event | None = None,
) -> str:
    """Build `context_dir`/`dockerfile` as `tag` and return the image id.

    Base images must exist locally: nothing is ever pulled, and a missing base is an
    ImageNotFound naming it (build the Horizon base with `horizon sandbox build`).
    Past `timeout` seconds (the whole call) the build is stopped on the engine and
    ImageBuildTimeout names the image; setting `cancel` stops it the same way (ImageBuildError).
    """
    started = time.monotonic()
    if timeout is not None and timeout <= 0:
        raise ValueError(f"build_image: timeout must be > 0 seconds, got {timeout!r}")
    client = docker_client or connect()
    root = Path(context_dir).resolve()
    dockerfile_path = root / dockerfile
    if not dockerfile_path.is_file():
        raise ImageBuildError(f"build_image: dockerfile {dockerfile_path} does not exist")
    text = dockerfile_path.read_text(encoding="utf-8")
    _check_bases_exist(client, text)
    certs = host_ca_certificates(ca_dir) if trust_host_ca else {}
    if certs:
        text = _with_trusted_certs(text)
    extra = [(dockerfile, text)] + [(f"{_CA_IN_CONTEXT}/{name}", pem) for name, pem in certs.items()]
    all_labels = {TASK_IMAGE_LABEL_KEY: tag, **(labels or {})}
    params = {"t": tag, "dockerfile": dockerfile, "buildargs": json.dumps(buildargs or {}),
              "labels": json.dumps(all_labels), "rm": 1, "forcerm": 1, "pull": 0}
    with tempfile.TemporaryFile() as context:
        _write_context(root, dockerfile, extra, context)
        context.seek(0)
        build = _StoppableBuild(client.api, f"{tag} from {dockerfile_path}")
        deadline = None if timeout is None else started + timeout
        return build.run(context, params, deadline, cancel, timeout)


class _StoppableBuild:
    """One POST /build whose log is streamed here. At the deadline or on cancel a watcher thread
    kills the build containers the log announces and, failing that, shuts the connection; the
    announced containers are then removed."""

    def __init__(self, api, what: str):
        self.api = api
        self.what = what  # "<tag> from <dockerfile path>", for messages
        self.log: list[str] = []
        self.containers: set[str] = set()  # build containers announced and not yet removed
        self._lock = threading.Lock()
        self._response = None
        self._stopped: str | None = None  # "timeout" or "cancel"
        self._shut = False  # the watcher gave up waiting: the connection is (to be) shut

    def run(self, context, params: dict, deadline: float | None, cancel: threading.Event | None,
            timeout: float | None) -> str:
        finished = threading.Event()
        if deadline is not None or cancel is not None:
            threading.Thread(target=self._watch, args=(finished, deadline, cancel), daemon=True,
                             name="horizon-build-watch").start()
        image_id = None
        try:
            image_id = self._stream(context, params)
        except ImageBuildError:
            if self._stopped is None:
                raise
        except Exception as exc:  # noqa: BLE001 - a broken stream is expected once the watcher shut it
            if self._stopped is None:
                raise ImageBuildError(f"building {self.what} failed: {type(exc).__name__}: {exc}") from exc
        finally:
            finished.set()
            if self._response is not None:
                self._response.close()
        if self._stopped is None or image_id is not None:
            return image_id
        left = self._remove_containers()
        tail = "".join(self.log)[-2000:]
        note = f"; build containers still present: {', '.join(sorted(left))}" if left else ""
        if self._stopped == "timeout":
            raise ImageBuildTimeout(f"building image {self.what} did not finish within {timeout:g}s: the build "
                                    f"was stopped{note}\n{tail}")
        raise ImageBuildError(f"building image {self.what} was cancelled: the build was stopped{note}\n{tail}")

    def _stream(self, context, params: dict) -> str:
        from docker.utils.json_stream import json_stream

        api = self.api
        response = api.post(f"{api.base_url}/v{api.api_version}/build", data=context, params=params,
                            headers={"Content-Type": "application/tar"}, stream=True, timeout=None)
        with self._lock:  # the watcher may have given up during the upload
            self._response = response
            shut = self._shut
        if shut:
            _shut(response)
        if response.status_code != 200:
            try:
                detail = response.json().get("message")
            except ValueError:
                detail = None
            raise ImageBuildError(f"building {self.what} failed: engine answered {response.status_code}: "
                                  f"{detail or response.text.strip()}")
        image_id = built = None
        for message in json_stream(response.iter_content(chunk_size=None)):
            if message.get("error"):
                log = "".join(self.log)[-4000:]
                self.log.append(message["error"].strip() + "\n")
                raise ImageBuildError(f"building {self.what} failed: {message['error'].strip()}\n{log}")
            text = message.get("stream") or ""
            self.log.append(text)
            for line in text.splitlines():
                if m := _RUNNING_IN.match(line):
                    with self._lock:
                        self.containers.add(m.group(1))
                elif m := _BUILT.match(line):
                    built = m.group(1)
            image_id = (message.get("aux") or {}).get("ID") or image_id
        if image_id is None and built is not None:
            image_id = api.inspect_image(built)["Id"]
        if image_id is None:
            if self._stopped is not None:
                raise ImageBuildError("stopped")
            raise ImageBuildError(f"building {self.what}: the engine's log ended without an image id\n"
                                  + "".join(self.log)[-4000:])
        return image_id

    def _watch(self, finished: threading.Event, deadline: float | None, cancel: threading.Event | None) -> None:
        while True:
            if finished.wait(0.1):
                return
            if cancel is not None and cancel.is_set():
                self._stopped = "cancel"
                break
            if deadline is not None and time.monotonic() >= deadline:
                self._stopped = "timeout"
                break
        # Killing the step's container fails the build, and the log keeps telling us about any
        # container a later step starts; the engine removes them itself (forcerm).
        give_up = time.monotonic() + _STOP_GRACE
        while time.monotonic() < give_up:
            with self._lock:
                running = sorted(self.containers)
            for cid in running:
                try:
                    self.api.kill(cid)
                except Exception:  # noqa: BLE001 - already stopped or removed
                    pass
            if finished.wait(0.1):
                return
        with self._lock:
            self._shut = True
            response = self._response
        if response is not None:
            _shut(response)

    def _remove_containers(self) -> set[str]:
        """Force-remove the announced build containers that are left; the ones still present after
        _CLEANUP_WAIT seconds."""
        import docker

        with self._lock:
            left = set(self.containers)
        deadline = time.monotonic() + _CLEANUP_WAIT
        while left:
            for cid in sorted(left):
                try:
                    self.api.remove_container(cid, force=True, v=True)
                    left.discard(cid)
                except docker.errors.NotFound:
                    left.discard(cid)
                except docker.errors.APIError:
                    pass  # the engine is removing it itself (409); look again
            if not left or time.monotonic() >= deadline:
                break
            time.sleep(0.2)
        return left


def _shut(response) -> None:
    """Shut the socket under a streamed response: wakes the reader in the other thread, and the engine
    cancels a build whose client has gone. docker-py reaches the socket the same way for attach."""
    raw = getattr(getattr(getattr(response.raw, "_fp", None), "fp", None), "raw", None)
    sock = getattr(raw, "_sock", None)
    if isinstance(sock, socket.socket):
        try:
            sock.shutdown(socket.SHUT_RDWR)
            return
        except OSError:
            pass
    response.close()


def _write_context(root: Path, dockerfile: str, extra: list[tuple[str, str]], fileobj) -> None:
    from docker.utils.build import create_archive, exclude_paths

    ignore = root / ".dockerignore"
    patterns = []
    if ignore.is_file():
        lines = ignore.read_text(encoding="utf-8").splitlines()
        patterns = [line.strip() for line in lines if line.strip() and not line.lstrip().startswith("#")]
    files = sorted(exclude_paths(str(root), patterns, dockerfile=dockerfile))
    create_archive(root=str(root), files=files, fileobj=fileobj, extra_files=extra)


def _stages(dockerfile_text: str) -> list[tuple[int, str, str | None]]:
    """(line index, base image, stage name) for each FROM line."""
    out = []
    for i, line in enumerate(dockerfile_text.splitlines()):
        m = _FROM.match(line)
        if m:
            out.append((i, m.group(1), m.group(2)))
    return out


def _check_bases_exist(client, dockerfile_text: str) -> None:
    import docker

    stage_names: set[str] = set()
    for _i, base, name in _stages(dockerfile_text):
        if base.lower() != "scratch" and base not in stage_names and "$" not in base:
            try:
                client.images.get(base)
            except docker.errors.ImageNotFound:
                hint = " (build it with `horizon sandbox build`)" if base.startswith("horizon/") else ""
                raise ImageNotFound(f"base image {base!r} is not present locally and images are never pulled{hint}") from None
        if name:
            stage_names.add(name)


def _with_trusted_certs(dockerfile_text: str) -> str:
    """Insert, after every FROM (except scratch), steps that add the host CAs to the trust store."""
    lines = dockerfile_text.splitlines()
    inject = [
        f"COPY {_CA_IN_CONTEXT}/ /usr/local/share/ca-certificates/horizon-host/",
        "RUN if command -v update-ca-certificates >/dev/null 2>&1; then update-ca-certificates >/dev/null 2>&1; "
        "else cat /usr/local/share/ca-certificates/horizon-host/*.crt >> /etc/ssl/certs/ca-certificates.crt; fi",
    ]
    for index, base, _name in reversed(_stages(dockerfile_text)):
        if base.lower() != "scratch":
            lines[index + 1:index + 1] = inject
    return "\n".join(lines) + "\n"
