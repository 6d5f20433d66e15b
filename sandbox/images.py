"""Builds task images from Dockerfiles `FROM` the base image, with the Docker SDK.

Network is on during builds only (task containers run with none). Behind a TLS-intercepting
proxy, HTTPS from inside a build (pip, apt over https, curl) fails unless the build trusts the
proxy's CA, so by default the host's extra CA certificates (the ones update-ca-certificates
installed from /usr/local/share/ca-certificates) are copied into each build stage and added to
the stage's trust store. Docker's layer cache keeps that to one cached step per base image.
"""

from __future__ import annotations

import os
import re
import tempfile
from pathlib import Path

from sandbox.constants import TASK_IMAGE_LABEL_KEY
from sandbox.docker_client import connect
from sandbox.errors import ImageBuildError, ImageNotFound

DEFAULT_HOST_CA_DIR = "/usr/local/share/ca-certificates"
CA_DIR_ENV = "HORIZON_BUILD_CA_DIR"
_CA_IN_CONTEXT = ".horizon-host-ca"
_FROM = re.compile(r"^\s*FROM\s+(?:--platform=\S+\s+)?(\S+)(?:\s+AS\s+(\S+))?\s*$", re.I)


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
) -> str:
    """Build `context_dir`/`dockerfile` as `tag` and return the image id.

    Base images must exist locally: nothing is ever pulled, and a missing base is an
    ImageNotFound naming it (build the Horizon base with `horizon sandbox build`).
    """
    import docker

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
    with tempfile.TemporaryFile() as context:
        _write_context(root, dockerfile, extra, context)
        context.seek(0)
        try:
            image, _logs = client.images.build(
                fileobj=context, custom_context=True, tag=tag, dockerfile=dockerfile,
                buildargs=buildargs or {}, labels=all_labels, rm=True, forcerm=True, pull=False,
            )
        except docker.errors.BuildError as exc:
            log = "".join(chunk.get("stream", "") or chunk.get("error", "") for chunk in exc.build_log)
            raise ImageBuildError(f"building {tag} from {dockerfile_path} failed: {exc.msg}\n{log[-4000:]}") from exc
        except docker.errors.APIError as exc:
            raise ImageBuildError(f"building {tag} from {dockerfile_path} failed: {exc}") from exc
    return image.id


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
