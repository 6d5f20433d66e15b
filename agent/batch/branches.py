"""`--branch-prefix`: commit each fix to a branch of the job's local repository.

Plumbing only (a temporary index, `git apply --cached`, `commit-tree`, `update-ref`), so the user's
working tree, index and checked-out branch are never touched, and parallel jobs on the same
repository cannot trip over each other beyond the per-repository lock.
"""

from __future__ import annotations

import os
import subprocess
import tempfile
import threading
from collections import defaultdict
from pathlib import Path

from agent.ownership import Owner

_repo_locks: defaultdict[str, threading.Lock] = defaultdict(threading.Lock)

COMMITTER = {
    "GIT_AUTHOR_NAME": "horizon-batch",
    "GIT_AUTHOR_EMAIL": "horizon-batch@localhost",
    "GIT_COMMITTER_NAME": "horizon-batch",
    "GIT_COMMITTER_EMAIL": "horizon-batch@localhost",
}


class BranchError(RuntimeError):
    pass


def commit_patch_to_branch(repo: Path, base_commit: str, branch: str, patch: str, message: str) -> str:
    """Create (or move) `branch` to a commit of `patch` on top of `base_commit`; returns the commit id."""
    repo = Path(repo).resolve()
    # As the repository's owner: objects and refs written by root would lock the user out of them.
    owner = Owner.for_repo(repo)
    with _repo_locks[str(repo)], tempfile.TemporaryDirectory(prefix="horizon-index-") as tmp:
        owner.claim(Path(tmp))
        run_as = owner.run_as({**os.environ, **COMMITTER, "GIT_INDEX_FILE": str(Path(tmp) / "index")})
        _git(repo, run_as, "read-tree", base_commit)
        _git(repo, run_as, "apply", "--cached", "--binary", "-", stdin=patch)
        tree = _git(repo, run_as, "write-tree")
        commit = _git(repo, run_as, "commit-tree", tree, "-p", base_commit, "-m", message)
        _git(repo, run_as, "update-ref", f"refs/heads/{branch}", commit)
        return commit


def _git(repo: Path, run_as: dict, *args: str, stdin: str | None = None) -> str:
    proc = subprocess.run(["git", "-C", str(repo), *args], input=stdin, capture_output=True, text=True, **run_as)
    if proc.returncode != 0:
        raise BranchError(f"git {args[0]} failed in {repo}: {proc.stderr.strip()}")
    return proc.stdout.strip()
