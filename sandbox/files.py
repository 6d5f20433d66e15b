"""Moving files between the host and a container with tar archives.

Two ways to move a tar archive: the Docker archive API (the default, no process in the
container) and `tar` run inside the container over an attached exec, for read-only root file
systems, where Docker refuses uploads and cannot see the tmpfs mounts. Archives are spooled
through temporary files, never held whole in memory, so copying a large folder costs disk, not RAM.
"""

from __future__ import annotations

import base64
import io
import json
import os
import posixpath
import shutil
import tarfile
import tempfile
import time
from pathlib import Path
from typing import IO, Protocol

from sandbox.errors import SandboxError

_GO_MODE_DIR = 1 << 31


class ArchiveTransport(Protocol):
    def kind(self, path: str) -> str | None:
        """'dir', 'file' or None when the path does not exist."""

    def put(self, parent: str, archive: IO[bytes], what: str) -> None:
        """Extract a tar stream into the existing directory `parent`."""

    def get(self, path: str, spool: IO[bytes]) -> None:
        """Write a tar archive of `path` (named by its base name) into `spool`."""


class DockerArchiveAPI:
    def __init__(self, api, container_id: str):
        self._api, self._id = api, container_id

    def kind(self, path: str) -> str | None:
        import docker

        try:
            res = self._api.head(self._api._url("/containers/{0}/archive", self._id), params={"path": path})
            self._api._raise_for_status(res)
        except docker.errors.NotFound:
            return None
        stat = json.loads(base64.b64decode(res.headers["X-Docker-Container-Path-Stat"]))
        return "dir" if stat["mode"] & _GO_MODE_DIR else "file"

    def put(self, parent: str, archive: IO[bytes], what: str) -> None:
        import docker

        try:
            ok = self._api.put_archive(self._id, parent, archive)
        except docker.errors.NotFound as exc:
            raise SandboxError(f"cannot write {what}: directory {parent} does not exist in the sandbox") from exc
        except docker.errors.APIError as exc:
            raise SandboxError(f"cannot write {what}: {exc.explanation or exc}") from exc
        if not ok:
            raise SandboxError(f"cannot write {what}: the engine refused the archive")

    def get(self, path: str, spool: IO[bytes]) -> None:
        import docker

        try:
            stream, _stat = self._api.get_archive(self._id, path, chunk_size=1 << 20)
            for chunk in stream:
                spool.write(chunk)
        except docker.errors.NotFound as exc:
            raise SandboxError(f"{path} does not exist in the sandbox") from exc


def put_bytes(transport: ArchiveTransport, path: str, data: bytes, uid: int, gid: int, mode: int = 0o644) -> None:
    parent, name = posixpath.split(path)
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        info = tarfile.TarInfo(name)
        info.size, info.mode, info.uid, info.gid, info.mtime = len(data), mode, uid, gid, int(time.time())
        tar.addfile(info, io.BytesIO(data))
    buf.seek(0)
    transport.put(parent or "/", buf, path)


def get_bytes(transport: ArchiveTransport, path: str) -> bytes:
    with tempfile.TemporaryFile() as spool:
        transport.get(path, spool)
        spool.seek(0)
        with tarfile.open(fileobj=spool, mode="r|") as tar:
            member = tar.next()
            if member is None or not member.isfile():
                kind = "a directory" if member is not None and member.isdir() else "not a regular file"
                raise SandboxError(f"read_file: {path} is {kind}")
            return tar.extractfile(member).read()


def copy_in(transport: ArchiveTransport, host_path: str | os.PathLike, dest: str, uid: int, gid: int) -> str:
    """Copy a host file or folder to `dest`: into it when it is an existing directory, else to it."""
    src = Path(host_path)
    if not src.exists():
        raise SandboxError(f"copy_in: host path {src} does not exist")
    if transport.kind(dest) == "dir":
        parent, name = dest, src.name
    else:
        parent, name = posixpath.split(dest.rstrip("/") or "/")
    final = posixpath.join(parent, name)

    def owned(info: tarfile.TarInfo) -> tarfile.TarInfo:
        info.uid, info.gid, info.uname, info.gname = uid, gid, "", ""
        return info

    with tempfile.TemporaryFile() as spool:
        with tarfile.open(fileobj=spool, mode="w") as tar:
            tar.add(str(src), arcname=name, filter=owned)
        spool.seek(0)
        transport.put(parent or "/", spool, final)
    return final


def copy_out(transport: ArchiveTransport, path: str, host_dest: str | os.PathLike) -> Path:
    """Copy a container file or folder to `host_dest`: into it when it is an existing directory, else to it."""
    dest = Path(host_dest)
    if dest.is_dir():
        target_dir, new_name = dest, None
    else:
        target_dir, new_name = dest.parent, dest.name
        target_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryFile() as spool:
        transport.get(path, spool)
        spool.seek(0)
        with tarfile.open(fileobj=spool, mode="r|") as tar, \
                tempfile.TemporaryDirectory(dir=target_dir, prefix=".horizon-copy-") as staging:
            top = None
            for member in tar:
                top = top or member.name.split("/")[0]
                tar.extract(member, staging, filter="data")
            if top is None:
                raise SandboxError(f"copy_out: {path} produced an empty archive")
            final = target_dir / (new_name or top)
            if final.exists() and new_name:
                shutil.rmtree(final) if final.is_dir() and not final.is_symlink() else final.unlink()
            os.replace(Path(staging) / top, final)
    return final
