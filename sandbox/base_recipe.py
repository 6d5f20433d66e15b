"""What goes into the base sandbox image, and the hash that decides whether to rebuild it.

The recipe is data: the Debian suite, the package list, the script run inside the new root file
system and the image settings applied at `docker import`. Its hash is stored as an image label,
so an unchanged recipe reuses the image and any change rebuilds it. The apt mirror is left out
of the hash on purpose: it only says where the same packages are fetched from.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from dataclasses import asdict, dataclass, field
from pathlib import Path

DEFAULT_MIRROR = "http://deb.debian.org/debian"
POST_INSTALL_SCRIPT = Path(__file__).with_name("base_post_install.sh")

# What agents and tasks need: a shell and core tools, git, python with pip/venv/pytest, tmux for
# interactive tasks, a C/C++ toolchain for sanitizer builds, and CA certificates for HTTPS.
PACKAGES = (
    "bash coreutils procps git python3 python3-pip python3-venv python3-pytest tmux curl "
    "gcc g++ make patch diffutils findutils grep sed less ca-certificates"
).split()

# Settings `docker import` bakes into the image (Dockerfile instruction syntax).
IMPORT_CHANGES = (
    "ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
    "ENV LANG=C.UTF-8",
    # Debian marks its python "externally managed"; task images are throwaway, so let pip install.
    "ENV PIP_BREAK_SYSTEM_PACKAGES=1",
    "WORKDIR /workspace",
    'CMD ["/bin/bash"]',
)


@dataclass(frozen=True)
class BaseRecipe:
    suite: str = "bookworm"
    variant: str = "minbase"
    packages: tuple[str, ...] = tuple(PACKAGES)
    import_changes: tuple[str, ...] = IMPORT_CHANGES
    post_install: str = field(default_factory=lambda: POST_INSTALL_SCRIPT.read_text(encoding="utf-8"))

    def digest(self) -> str:
        """Hash of everything that shapes the image's content (not the mirror)."""
        blob = json.dumps(asdict(self), sort_keys=True).encode()
        return hashlib.sha256(blob).hexdigest()[:24]

    def packages_digest(self) -> str:
        """Hash of what debootstrap downloads; keys the cached .deb tarball."""
        blob = json.dumps([self.suite, self.variant, sorted(self.packages)]).encode()
        return hashlib.sha256(blob).hexdigest()[:24]


def host_debian_mirror(suite: str = "bookworm") -> str:
    """The Debian mirror this host's apt already uses ($HORIZON_DEBIAN_MIRROR overrides).

    Reusing the host's mirror keeps builds working behind whatever mirror or proxy apt is set up
    for; deb.debian.org is the fallback.
    """
    explicit = os.environ.get("HORIZON_DEBIAN_MIRROR")
    if explicit:
        return explicit.rstrip("/")
    sources = sorted(Path("/etc/apt/sources.list.d").glob("*.sources"))
    for path in sources:
        for stanza in path.read_text(encoding="utf-8", errors="replace").split("\n\n"):
            uris = re.search(r"^URIs:\s*(\S+)", stanza, re.M)
            suites = re.search(r"^Suites:\s*(.+)$", stanza, re.M)
            if uris and suites and suite in suites.group(1).split() and uris.group(1).startswith("http"):
                return uris.group(1).rstrip("/")
    lists = [Path("/etc/apt/sources.list"), *sorted(Path("/etc/apt/sources.list.d").glob("*.list"))]
    for path in lists:
        if not path.is_file():
            continue
        for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
            parts = line.split()
            if len(parts) >= 3 and parts[0] == "deb" and parts[2] == suite and parts[1].startswith("http"):
                return parts[1].rstrip("/")
    return DEFAULT_MIRROR
