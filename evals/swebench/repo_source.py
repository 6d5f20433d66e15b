"""Where an instance's repository comes from: a URL, a local clone or a git bundle.

In the instance build the source is cloned at `base_commit` by swebench's own setup script. A local
clone is handed to the build as a bundle of all its refs (only git objects travel, never a working
tree); a URL is cloned by the build itself, with the build's network.
"""

from __future__ import annotations

import hashlib
import shutil
import subprocess
import tempfile
import threading
from pathlib import Path

_URL_PREFIXES = ("https://", "http://", "git://", "ssh://", "git@")  # cloned inside the build


class RepoSourceError(RuntimeError):
    pass


def _git(*args: str, timeout: float = 600) -> subprocess.CompletedProcess:
    return subprocess.run(["git", *args], capture_output=True, text=True, timeout=timeout,
                          env={"GIT_CONFIG_GLOBAL": "/dev/null", "GIT_TERMINAL_PROMPT": "0", "PATH": "/usr/bin:/bin"})


class RepoSource:
    def __init__(self, location: str | Path):
        # file:// names a path on this machine, which a build container cannot see: handled as local.
        self.location = str(location).removeprefix("file://")
        self.is_remote = self.location.startswith(_URL_PREFIXES)
        self._bare: Path | None = None
        self._lock = threading.Lock()
        if not self.is_remote and not Path(self.location).exists():
            raise RepoSourceError(f"no repository at {self.location}")

    @property
    def url(self) -> str:
        return self.location

    @property
    def is_bundle(self) -> bool:
        return not self.is_remote and Path(self.location).is_file()

    def stage(self, dest: Path) -> None:
        """Write the source into a build context as one file, `dest` (a git bundle)."""
        if self.is_bundle:
            shutil.copy2(self.location, dest)
            return
        made = _git("-C", self.location, "bundle", "create", str(dest), "--all")
        if made.returncode != 0:
            raise RepoSourceError(f"git bundle of {self.location} failed: {made.stderr.strip()[-500:]}")

    def _readable(self) -> Path:
        """A bare clone to read files at a commit from (made once, lazily)."""
        with self._lock:
            if self._bare is None:
                if not self.is_remote and not self.is_bundle:
                    self._bare = Path(self.location)
                else:
                    key = hashlib.sha256(self.location.encode()).hexdigest()[:16]
                    target = Path(tempfile.gettempdir()) / f"horizon-swebench-src-{key}"
                    if not (target / "HEAD").exists():
                        cloned = _git("clone", "-q", "--bare", self.location, str(target))
                        if cloned.returncode != 0:
                            raise RepoSourceError(f"git clone {self.location} failed: {cloned.stderr.strip()[-500:]}")
                    self._bare = target
            return self._bare

    def read_file(self, commit: str, path: str) -> str | None:
        shown = _git("-C", str(self._readable()), "show", f"{commit}:{path}", timeout=60)
        return shown.stdout if shown.returncode == 0 else None
