"""Moving files between the host and a container with tar archives (the Docker archive API).

Archives are spooled through temporary files, never held whole in memory, so copying a large
folder costs disk, not RAM.
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

from sandbox.errors import SandboxError

_GO_MODE_DIR = 1 << 31


def container_stat(api, container_id: str, path: str) -> dict | None:
    """{'name','size','mode','mtime','linkTarget'} of a path in the container, None if absent."""
    import docker

    try:
        res = api.head(api._url("/containers/{0}/archive", container_id), params={"path": path})
        api._raise_for_status(res)
    except docker.errors.NotFound:
        return None
    header = res.headers.get("X-Docker-Container-Path-Stat")
    return json.loads(base64.b64decode(header)) if header else None


def is_dir(stat: dict | None) -> bool:
    return bool(stat) and bool(stat["mode"] & _GO_MODE_DIR)


def put_bytes(api, container_id: str, path: str, data: bytes, uid: int, gid: int, mode: int = 0o644) -> None:
    parent, name = posixpath.split(path)
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        info = tarfile.TarInfo(name)
        info.size, info.mode, info.uid, info.gid, info.mtime = len(data), mode, uid, gid, int(time.time())
        tar.addfile(info, io.BytesIO(data))
    _put(api, container_id, parent or "/", buf.getvalue(), path)


def get_bytes(api, container_id: str, path: str) -> bytes:
    with _fetch(api, container_id, path) as spool, tarfile.open(fileobj=spool, mode="r|") as tar:
        member = tar.next()
        if member is None or not member.isfile():
            kind = "a directory" if member is not None and member.isdir() else "not a regular file"
            raise SandboxError(f"read_file: {path} is {kind}")
        return tar.extractfile(member).read()


def copy_in(api, container_id: str, host_path: str | os.PathLike, dest: str, uid: int, gid: int) -> str:
    """Copy a host file or folder to `dest`: into it when it is an existing directory, else to it."""
    src = Path(host_path)
    if not src.exists():
        raise SandboxError(f"copy_in: host path {src} does not exist")
    stat = container_stat(api, container_id, dest)
    if is_dir(stat):
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
        _put(api, container_id, parent or "/", spool, final)
    return final


def copy_out(api, container_id: str, path: str, host_dest: str | os.PathLike) -> Path:
    """Copy a container file or folder to `host_dest`: into it when it is an existing directory, else to it."""
    dest = Path(host_dest)
    if dest.is_dir():
        target_dir, new_name = dest, None
    else:
        target_dir, new_name = dest.parent, dest.name
        target_dir.mkdir(parents=True, exist_ok=True)
    with _fetch(api, container_id, path) as spool, tarfile.open(fileobj=spool, mode="r|") as tar:
        top = None
        with tempfile.TemporaryDirectory(dir=target_dir, prefix=".horizon-copy-") as staging:
            for member in tar:
                top = top or member.name.split("/")[0]
                tar.extract(member, staging, filter="data")
            final = target_dir / (new_name or top)
            if final.exists() and new_name:
                shutil.rmtree(final) if final.is_dir() and not final.is_symlink() else final.unlink()
            os.replace(Path(staging) / top, final)
    return final


def _put(api, container_id: str, parent: str, data, what: str) -> None:
    import docker

    try:
        ok = api.put_archive(container_id, parent, data)
    except docker.errors.NotFound as exc:
        raise SandboxError(f"cannot write {what}: directory {parent} does not exist in the sandbox") from exc
    except docker.errors.APIError as exc:
        raise SandboxError(f"cannot write {what}: {exc.explanation or exc}") from exc
    if not ok:
        raise SandboxError(f"cannot write {what}: the engine refused the archive")


class _fetch:
    """Context manager: the tar archive of a container path, spooled to a temporary file."""

    def __init__(self, api, container_id: str, path: str):
        self._args = (api, container_id, path)
        self._spool = None

    def __enter__(self):
        import docker

        api, container_id, path = self._args
        try:
            stream, _stat = api.get_archive(container_id, path, chunk_size=1 << 20)
        except docker.errors.NotFound as exc:
            raise SandboxError(f"{path} does not exist in the sandbox") from exc
        self._spool = tempfile.TemporaryFile()
        for chunk in stream:
            self._spool.write(chunk)
        self._spool.seek(0)
        return self._spool

    def __exit__(self, *exc):
        self._spool.close()
