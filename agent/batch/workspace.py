"""Each job works on its own clone of the repository, checked out detached at the base ref.

The clone lives on the host and is mounted into the job's sandbox, so the patch can be read back
with the host's git even when the sandbox had to be killed (a timed-out job still reports what it
changed). It belongs to the repository's owner (see agent/ownership.py) and every git
command on it runs as them.
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from agent.batch.jobs import BatchJob
from agent.ownership import Owner


class WorkspaceError(RuntimeError):
    pass


@dataclass
class JobWorkspace:
    root: Path  # what remove() deletes: the clone's temporary folder
    path: Path  # the checkout itself, mounted at the sandbox's workdir
    base_commit: str
    owner: Owner
    keep: bool = False  # --keep-workspaces: the checkout stays for the user to inspect

    def diff(self) -> str:
        """Everything the job changed against the base commit, new files and binaries included."""
        _git(self.path, self.owner, "add", "-A")
        return _git(self.path, self.owner, "diff", "--cached", "--binary", self.base_commit, strip=False)

    def remove(self) -> None:
        if not self.keep:
            shutil.rmtree(self.root, ignore_errors=True)


def prepare_workspace(job: BatchJob, scratch: Path | None = None, keep_at: Path | None = None) -> JobWorkspace:
    """Clone into a fresh temporary folder (under `scratch`), or into `keep_at`, which must not exist."""
    owner = Owner.for_repo(job.repo) if job.is_local else Owner.me()
    if keep_at is not None:
        root = dest = keep_at
        dest.mkdir(parents=True)
    else:
        root = Path(tempfile.mkdtemp(prefix=f"horizon-{job.id}-", dir=scratch))
        dest = root / "repo"
        dest.mkdir()
    owner.claim(root)
    owner.claim(dest)
    try:
        _git(None, owner, "clone", "--quiet", "--no-hardlinks", job.repo, str(dest))
        base = _resolve_ref(dest, owner, job.base_ref)
        _git(dest, owner, "checkout", "--quiet", "--detach", base)
        # The agent may run `git commit`; give the clone an identity so that cannot fail.
        _git(dest, owner, "config", "user.email", "horizon-batch@localhost")
        _git(dest, owner, "config", "user.name", "horizon-batch")
        # Bytecode caches written by the agent's or the test's Python runs are not part of a fix.
        exclude = dest / ".git" / "info" / "exclude"
        exclude.parent.mkdir(exist_ok=True)
        with exclude.open("a", encoding="utf-8") as f:
            f.write("\n__pycache__/\n*.py[co]\n")
        owner.claim(exclude.parent)
        owner.claim(exclude)
    except WorkspaceError:
        shutil.rmtree(root, ignore_errors=True)
        raise
    return JobWorkspace(root=root, path=dest, base_commit=base, owner=owner, keep=keep_at is not None)


def _resolve_ref(repo: Path, owner: Owner, ref: str) -> str:
    for candidate in (ref, f"origin/{ref}"):
        try:
            return _git(repo, owner, "rev-parse", "--verify", "--quiet", f"{candidate}^{{commit}}")
        except WorkspaceError:
            continue
    # A clone fetches branches and tags only: a pull-request head (refs/pull/N/head) or a commit
    # reachable only from such a ref has to be asked for by name.
    try:
        _git(repo, owner, "fetch", "--quiet", "origin", ref)
        return _git(repo, owner, "rev-parse", "--verify", "--quiet", "FETCH_HEAD^{commit}")
    except WorkspaceError:
        pass
    raise WorkspaceError(f"base_ref {ref!r} does not name a commit in the repository")


def _git(repo: Path | None, owner: Owner, *args: str, strip: bool = True) -> str:
    cmd = ["git", *(["-C", str(repo)] if repo else []), *args]
    proc = subprocess.run(cmd, capture_output=True, text=True, **owner.run_as())
    if proc.returncode != 0:
        raise WorkspaceError(f"git {args[0]} failed: {proc.stderr.strip() or proc.stdout.strip()}")
    return proc.stdout.strip() if strip else proc.stdout
