"""Whose files a mounted checkout holds, and giving back what the container wrote (batch jobs,
the chat's workspace).

A job's checkout belongs to one host user: the owner of the job's repository when horizon runs as
root (`sudo horizon batch`, a root CI runner), else the user running horizon. Host-side git on the
checkout and on the repository runs as that owner, so it never leaves root-owned files in a user's
repository and git's "dubious ownership" check passes.

Inside the sandbox the agent runs as the image's user, normally root, and everything it creates
under the mounted checkout is root-owned on the host: the owner could then neither delete nor
commit it, and the host's own `git add` fails on object folders the agent's `git commit` made.
`give_back` runs `chown -R` inside the container as root, which works when the host user is not
root. The alternative, running the whole sandbox as the owner's uid, was rejected: setup and
agent commands routinely need root (apt-get, pip installs into the system), and an arbitrary uid
has no home directory or passwd entry in the image, so tools would break in ways that depend on
the image. Root while working, ownership returned after (and after a kill, from a fresh container).
"""

from __future__ import annotations

import os
import pwd
from dataclasses import dataclass
from pathlib import Path

CHOWN_TIMEOUT_S = 300.0


class OwnershipError(RuntimeError):
    pass


@dataclass(frozen=True)
class Owner:
    uid: int
    gid: int

    @classmethod
    def of(cls, path: str | Path) -> Owner:
        st = os.stat(path)
        return cls(st.st_uid, st.st_gid)

    @classmethod
    def me(cls) -> Owner:
        return cls(os.geteuid(), os.getegid())

    @classmethod
    def for_repo(cls, repo: str | Path) -> Owner:
        """Who a checkout of `repo` belongs to. Only root can act for another user, so any other
        process keeps its checkouts for itself."""
        return cls.of(repo) if os.geteuid() == 0 else cls.me()

    def __str__(self) -> str:
        return f"{self.uid}:{self.gid}"

    def _is_someone_else(self) -> bool:
        return os.geteuid() == 0 and (self.uid, self.gid) != (0, 0)

    def claim(self, path: Path) -> None:
        """Give a folder or file horizon just made for this owner to them (a no-op unless root)."""
        if self._is_someone_else():
            os.lchown(path, self.uid, self.gid)

    def run_as(self, env: dict[str, str] | None = None) -> dict:
        """`subprocess.run` keyword arguments for a process acting as this owner."""
        env = dict(os.environ if env is None else env)
        if not self._is_someone_else():
            return {"env": env}
        env.pop("XDG_CONFIG_HOME", None)
        env["HOME"] = _home(self.uid)
        return {"env": env, "user": self.uid, "group": self.gid, "extra_groups": [], "cwd": "/"}

    def chown_argv(self, target: str) -> list[str]:
        # --no-dereference: a symlink the agent made to a path outside the checkout changes itself,
        # never its target; -R does not follow symlinked folders either.
        return ["chown", "-R", "--no-dereference", f"{self.uid}:{self.gid}", target]


def give_back(owner: Owner, sandbox, target: str) -> None:
    """Everything under `target` (the mounted checkout) to `owner`, done as root in the container."""
    result = sandbox.exec_once(owner.chown_argv(target), timeout=CHOWN_TIMEOUT_S, user="0:0")
    if result.exit_code != 0:
        raise OwnershipError(f"chown exited with {result.exit_code}: {result.output.strip()[-300:]}")


def give_back_created(owner: Owner, sandbox, target: str) -> None:
    """Only the root-owned entries under `target` to `owner` (after each chat turn): `find` reads
    metadata alone, so an unchanged large checkout costs little. Nothing to do for a root owner."""
    if (owner.uid, owner.gid) == (0, 0):
        return
    argv = ["find", target, "(", "-uid", "0", "-o", "-gid", "0", ")", "-exec", "chown", "--no-dereference",
            f"{owner.uid}:{owner.gid}", "{}", "+"]
    result = sandbox.exec_once(argv, timeout=CHOWN_TIMEOUT_S, user="0:0")
    if result.exit_code != 0:
        raise OwnershipError(f"find/chown exited with {result.exit_code}: {result.output.strip()[-300:]}")


def _home(uid: int) -> str:
    """The owner's home, for their git config; a path that does not exist when they have none
    (git then reads no global config, instead of warning about root's unreadable one)."""
    try:
        home = pwd.getpwuid(uid).pw_dir
    except KeyError:
        return "/nonexistent"
    return home if os.path.isdir(home) else "/nonexistent"
