"""The tools the harness needs inside a task container, for images that lack them.

Terminal-Bench 2 images, like Harbor's, carry no tmux: Harbor's agents install what they need at
setup (`apt-get`, `dnf`, `yum`, `apk`). Horizon does the same for every agent (oracle and nop
included), and when that cannot work (no network, no package manager, a failed install) falls back
to its own toolbox: the host's tmux with the shared libraries and the glibc loader it links against,
plus Debian's statically linked bash (`bash-static`), in a read-only folder mounted at
/opt/horizon-tools. The loader runs tmux with those libraries only (`--library-path`, not
LD_LIBRARY_PATH), so nothing the pane starts inherits them and musl/busybox images work too.
The static bash also runs the sandbox's persistent shell in images without bash, so a task image
needs no more than a POSIX `sh` (and `timeout`, which busybox has).

The toolbox is built once per host from the installed binaries (scripts/setup.sh installs tmux and
bash-static) under ~/.cache/horizon, keyed by their content. A bind mount needs the Docker engine on
this host; with a remote engine (`[[engines]] docker_host = "tcp://..."`) only the package route is used.
"""

from __future__ import annotations

import hashlib
import logging
import os
import re
import shutil
import subprocess
import threading
from pathlib import Path

log = logging.getLogger("evals.container_tools")

TOOLBOX_MOUNT = "/opt/horizon-tools"
TOOLBOX_BASH = f"{TOOLBOX_MOUNT}/bin/bash"
ROOT = "0"
INSTALL_TIMEOUT_SEC = 300.0

# What Harbor's installed agents run for a missing system package, per package manager.
INSTALL_COMMANDS = {
    "apt-get": "DEBIAN_FRONTEND=noninteractive apt-get update -qq && "
               "DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends {pkgs}",
    "dnf": "dnf install -y {pkgs}",
    "microdnf": "microdnf install -y {pkgs}",
    "yum": "yum install -y {pkgs}",
    "apk": "apk add --no-cache {pkgs}",
}
_STATIC_BASH = ("/bin/bash-static", "/usr/bin/bash-static")
_TERMINFO = ("screen", "screen-256color", "tmux", "tmux-256color", "xterm", "xterm-256color", "linux", "vt100", "dumb")
_LDD_PATH = re.compile(r"(/\S+)")


class ToolSetupFailed(RuntimeError):
    """A tool the agent interface needs could not be put into the container. It fails the same way
    on every retry (the image and the network policy do not change), so it is not retried."""


def _toolbox_key(tmux: Path | None, bash: Path | None) -> str:
    digest = hashlib.sha256(b"horizon-toolbox-v3")
    for path in (tmux, bash):
        if path is not None:
            digest.update(path.read_bytes())
    return digest.hexdigest()[:16]


def _shared_libraries(binary: Path) -> list[Path]:
    """The libraries (and loader) `binary` links against, from `ldd`."""
    out = subprocess.run(["ldd", str(binary)], capture_output=True, text=True, check=True).stdout
    libs = []
    for line in out.splitlines():
        if "linux-vdso" in line or "not found" in line:
            continue
        m = _LDD_PATH.search(line.split("=>")[-1])
        if m:
            libs.append(Path(m.group(1)))
    return libs


_build_lock = threading.Lock()


def host_toolbox(cache_dir: Path | None = None) -> Path | None:
    """The host folder to mount at TOOLBOX_MOUNT (built on first use), or None when this host has
    neither tmux nor a static bash to offer."""
    tmux = shutil.which("tmux")
    bash = next((Path(p) for p in _STATIC_BASH if os.access(p, os.X_OK)), None)
    tmux_path = Path(tmux).resolve() if tmux else None
    if tmux_path is None and bash is None:
        return None
    root = Path(cache_dir or os.environ.get("HORIZON_TOOLBOX_DIR") or Path.home() / ".cache" / "horizon")
    dest = root / f"toolbox-{_toolbox_key(tmux_path, bash)}"
    with _build_lock:
        if (dest / ".complete").is_file():
            return dest
        tmp = dest.with_name(dest.name + f".tmp-{os.getpid()}")
        shutil.rmtree(tmp, ignore_errors=True)
        (tmp / "bin").mkdir(parents=True)
        if bash is not None:
            shutil.copy2(bash, tmp / "bin" / "bash")
        if tmux_path is not None:
            (tmp / "lib").mkdir()
            (tmp / "libexec").mkdir()
            shutil.copy2(tmux_path, tmp / "libexec" / "tmux")
            loader = None
            for lib in _shared_libraries(tmux_path):
                shutil.copy2(lib.resolve(), tmp / "lib" / lib.name)
                if lib.name.startswith("ld-linux"):
                    loader = lib.name
            if loader is None:
                raise RuntimeError(f"{tmux_path}: no dynamic loader in its ldd output; cannot build the toolbox")
            # tmux insists on a UTF-8 locale; the bundled glibc finds its own C.UTF-8 through LOCPATH
            # (which the pane's shell drops again, see evals/tmux.py).
            locale = Path("/usr/lib/locale/C.utf8")
            if locale.is_dir():
                shutil.copytree(locale, tmp / "locale" / "C.utf8")
            # A tmux client inside the pane (`tmux wait -S done`) needs terminfo for TERM=screen/tmux.
            for name in _TERMINFO:
                for base in ("/lib/terminfo", "/usr/share/terminfo", "/etc/terminfo"):
                    entry = Path(base) / name[0] / name
                    if entry.is_file():
                        (tmp / "terminfo" / name[0]).mkdir(parents=True, exist_ok=True)
                        shutil.copy2(entry.resolve(), tmp / "terminfo" / name[0] / name)
                        break
            wrapper = (f"#!/bin/sh\nTERMINFO={TOOLBOX_MOUNT}/terminfo LOCPATH={TOOLBOX_MOUNT}/locale LC_ALL=C.UTF-8 exec {TOOLBOX_MOUNT}/lib/{loader} "
                       f"--library-path {TOOLBOX_MOUNT}/lib {TOOLBOX_MOUNT}/libexec/tmux \"$@\"\n")
            (tmp / "bin" / "tmux").write_text(wrapper, encoding="utf-8")
            (tmp / "bin" / "tmux").chmod(0o755)
        (tmp / ".complete").write_text("ok\n", encoding="utf-8")
        if dest.exists():
            shutil.rmtree(dest, ignore_errors=True)
        tmp.rename(dest)
        return dest


def _sh(sb, script: str, timeout: float = 30.0, *args: str):
    return sb.exec_once(["sh", "-c", script, "sh", *args], timeout=timeout, user=ROOT)


def has_command(sb, name: str) -> bool:
    return _sh(sb, 'command -v "$1" >/dev/null 2>&1', 30.0, name).exit_code == 0


def package_manager(sb) -> str | None:
    probe = _sh(sb, 'for m in apt-get dnf microdnf yum apk; do command -v "$m" >/dev/null 2>&1 && '
                    '{ printf %s "$m"; exit 0; }; done; exit 1')
    return probe.output.strip() if probe.exit_code == 0 else None


def ensure_tmux(sb, network: bool, toolbox_mounted: bool) -> list[str]:
    """Make `tmux` runnable in `sb` (as every user); return notes saying how. Raises ToolSetupFailed."""
    if has_command(sb, "tmux"):
        return []
    tried = []
    manager = package_manager(sb) if network else None
    if manager is not None:
        result = _sh(sb, INSTALL_COMMANDS[manager].format(pkgs="tmux"), INSTALL_TIMEOUT_SEC)
        if result.exit_code == 0 and has_command(sb, "tmux"):
            return [f"tmux was not in the image: installed with {manager}"]
        tried.append(f"{manager} install tmux failed ({result.exit_code}): {result.output.strip()[-300:]}")
    elif not network:
        tried.append("no network for a package manager")
    else:
        tried.append("no package manager (apt-get, dnf, microdnf, yum, apk)")
    if toolbox_mounted:
        # On PATH for docker exec, the pane's login shell and the solution's `tmux wait -S`.
        linked = _sh(sb, 'test -x "$1/bin/tmux" || exit 3; for d in /usr/local/bin /usr/bin; do '
                         'mkdir -p "$d" 2>/dev/null && ln -sf "$1/bin/tmux" "$d/tmux" && exit 0; done; exit 4',
                     30.0, TOOLBOX_MOUNT)
        if linked.exit_code == 0 and has_command(sb, "tmux"):
            return [f"tmux was not in the image ({'; '.join(tried)}): linked Horizon's toolbox tmux "
                    f"({TOOLBOX_MOUNT}) into the container"]
        tried.append(f"linking the toolbox tmux failed ({linked.exit_code}): {linked.output.strip()[-200:]}")
    else:
        tried.append("no toolbox mounted (a remote Docker engine, or no tmux on this host)")
    raise ToolSetupFailed("tmux is not in the task image and could not be installed: " + "; ".join(tried))

