"""Each job works on its own clone of the repository, checked out detached at the base ref.

The clone lives on the host and is mounted into the job's sandbox, so the patch can be read back
with the host's git even when the sandbox had to be killed (a timed-out job still reports what it
changed).
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from agent.batch.jobs import BatchJob


class WorkspaceError(RuntimeError):
    pass


@dataclass
class JobWorkspace:
    path: Path
    base_commit: str

    def diff(self) -> str:
        """Everything the job changed against the base commit, new files and binaries included."""
        _git(self.path, "add", "-A")
        return _git(self.path, "diff", "--cached", "--binary", self.base_commit, strip=False)

    def remove(self) -> None:
        shutil.rmtree(self.path.parent, ignore_errors=True)


def prepare_workspace(job: BatchJob, scratch: Path | None = None) -> JobWorkspace:
    root = Path(tempfile.mkdtemp(prefix=f"horizon-{job.id}-", dir=scratch))
    dest = root / "repo"
    try:
        _git(None, "clone", "--quiet", "--no-hardlinks", job.repo, str(dest))
        base = _resolve_ref(dest, job.base_ref)
        _git(dest, "checkout", "--quiet", "--detach", base)
        # The agent may run `git commit`; give the clone an identity so that cannot fail.
        _git(dest, "config", "user.email", "horizon-batch@localhost")
        _git(dest, "config", "user.name", "horizon-batch")
        # Bytecode caches written by the agent's or the test's Python runs are not part of a fix.
        with (dest / ".git" / "info" / "exclude").open("a", encoding="utf-8") as f:
            f.write("\n__pycache__/\n*.py[co]\n")
    except WorkspaceError:
        shutil.rmtree(root, ignore_errors=True)
        raise
    return JobWorkspace(path=dest, base_commit=base)


def _resolve_ref(repo: Path, ref: str) -> str:
    for candidate in (ref, f"origin/{ref}"):
        try:
            return _git(repo, "rev-parse", "--verify", "--quiet", f"{candidate}^{{commit}}")
        except WorkspaceError:
            continue
    # A clone fetches branches and tags only: a pull-request head (refs/pull/N/head) or a commit
    # reachable only from such a ref has to be asked for by name.
    try:
        _git(repo, "fetch", "--quiet", "origin", ref)
        return _git(repo, "rev-parse", "--verify", "--quiet", "FETCH_HEAD^{commit}")
    except WorkspaceError:
        pass
    raise WorkspaceError(f"base_ref {ref!r} does not name a commit in the repository")


def _git(repo: Path | None, *args: str, strip: bool = True) -> str:
    cmd = ["git", *(["-C", str(repo)] if repo else []), *args]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise WorkspaceError(f"git {args[0]} failed: {proc.stderr.strip() or proc.stdout.strip()}")
    return proc.stdout.strip() if strip else proc.stdout
