"""Task images for the Harbor-fidelity tests, made offline: a Debian image without tmux (as TB2's
are), and a busybox-only image (no bash, no perl, no tmux: only a POSIX sh, like a bare Alpine)."""

from __future__ import annotations

import io
import shutil
import subprocess
import tarfile
import tempfile
from pathlib import Path

from sandbox import BASE_IMAGE
from sandbox.images import build_image

DEBIAN_NO_TMUX = "horizon-test/debian-no-tmux:1"
BUSYBOX_ONLY = "horizon-test/busybox-only:1"
BUSYBOX = "/bin/busybox"  # Debian's busybox-static (scripts/setup.sh installs it)


def _present(client, tag: str) -> bool:
    import docker

    try:
        client.images.get(tag)
        return True
    except docker.errors.ImageNotFound:
        return False


def debian_without_tmux(client) -> str:
    if not _present(client, DEBIAN_NO_TMUX):
        with tempfile.TemporaryDirectory() as ctx:
            (Path(ctx) / "Dockerfile").write_text(
                f"FROM {BASE_IMAGE}\nRUN dpkg --purge tmux && ! command -v tmux\nWORKDIR /app\n")
            build_image(ctx, DEBIAN_NO_TMUX, docker_client=client, timeout=300)
    return DEBIAN_NO_TMUX


def busybox_only(client) -> str:
    """A rootfs of busybox-static and its applet links, imported with `docker import`."""
    if _present(client, BUSYBOX_ONLY):
        return BUSYBOX_ONLY
    if not Path(BUSYBOX).is_file():
        raise RuntimeError(f"{BUSYBOX} is missing: install Debian's busybox-static (scripts/setup.sh does)")
    applets = subprocess.run([BUSYBOX, "--list"], capture_output=True, text=True, check=True).stdout.split()
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        def add_dir(name: str, mode: int = 0o755):
            info = tarfile.TarInfo(name)
            info.type, info.mode = tarfile.DIRTYPE, mode
            tar.addfile(info)

        def add_file(name: str, data: bytes, mode: int = 0o644):
            info = tarfile.TarInfo(name)
            info.size, info.mode = len(data), mode
            tar.addfile(info, io.BytesIO(data))

        for d in ("bin", "etc", "root", "app", "usr", "usr/bin", "usr/local", "usr/local/bin", "var", "proc", "sys", "dev"):
            add_dir(d)
        add_dir("tmp", 0o1777)
        add_file("bin/busybox", Path(BUSYBOX).read_bytes(), 0o755)
        for applet in applets:
            if applet in ("bash", "perl", "tmux", "busybox"):
                continue
            link = tarfile.TarInfo(f"bin/{applet}")
            link.type, link.linkname = tarfile.SYMTYPE, "busybox"
            tar.addfile(link)
        add_file("etc/passwd", b"root:x:0:0:root:/root:/bin/sh\n")
        add_file("etc/group", b"root:x:0:\n")
        add_file("etc/profile", b"export PATH=/usr/local/bin:/usr/bin:/bin\n")
    client.api.import_image_from_data(buf.getvalue(), repository=BUSYBOX_ONLY.split(":")[0], tag="1",
                                      changes=["WORKDIR /app", "ENV PATH=/usr/local/bin:/usr/bin:/bin"])
    return BUSYBOX_ONLY


def tag_local(client, source: str, tag: str) -> str:
    """`source` under another local tag (a task's prebuilt `docker_image`)."""
    repo, _, version = tag.partition(":")
    client.images.get(source).tag(repo, version or "latest")
    return tag


def harbor_task(root: Path, name: str, *, toml: str, solve: str, test: str, dockerfile: str | None = None,
                files: dict[str, str] | None = None) -> Path:
    folder = root / name
    if folder.exists():
        shutil.rmtree(folder)
    for sub in ("environment", "solution", "tests"):
        (folder / sub).mkdir(parents=True)
    (folder / "task.toml").write_text(toml)
    (folder / "instruction.md").write_text(f"Task {name}: see the tests.\n")
    if dockerfile is not None:
        (folder / "environment" / "Dockerfile").write_text(dockerfile)
    (folder / "solution" / "solve.sh").write_text(solve)
    (folder / "tests" / "test.sh").write_text(test)
    for rel, text in (files or {}).items():
        (folder / rel).parent.mkdir(parents=True, exist_ok=True)
        (folder / rel).write_text(text)
    return folder
