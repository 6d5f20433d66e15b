"""The repository inside a sandbox: copy it in, remember its starting state, diff against it.

The starting state is committed to a private git directory outside the workspace
(`BASELINE_GIT_DIR`), so the repository's own `.git` (if any) is left exactly as it was, the
agent's git commands see the real history, and `diff()` is the change the agent made relative to
what was copied in — uncommitted changes of the original included. `.gitignore` is honoured, so
build outputs do not end up in the patch. The patch applies to the original with `git apply`.
"""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import Any

BASELINE_GIT_DIR = "/tmp/horizon-baseline.git"
DIFF_FILE = "/tmp/horizon-workspace.diff"
PATCH_TIMEOUT_S = 300
# Caches that tests and builds drop into the tree; never part of the agent's change.
CACHE_PATTERNS = ("__pycache__/", "*.py[co]", ".pytest_cache/", ".mypy_cache/", ".ruff_cache/", ".hypothesis/")


class WorkspaceError(RuntimeError):
    pass


def _git(workdir: str) -> str:
    return (
        f"git --git-dir={BASELINE_GIT_DIR} --work-tree={shlex.quote(workdir)} "
        "-c user.name=horizon -c user.email=horizon@localhost -c core.autocrlf=false -c 'safe.directory=*'"
    )


def _run(sandbox: Any, script: str, what: str) -> str:
    result = sandbox.exec_once(["bash", "-c", script], timeout=PATCH_TIMEOUT_S)
    if result.exit_code != 0:
        raise WorkspaceError(f"{what} failed (exit {result.exit_code}): {result.output.strip()[-1000:]}")
    return result.output


def copy_repo_in(sandbox: Any, repo: str | Path, workdir: str) -> None:
    """Copy the contents of a host folder into `workdir` (which already exists in the sandbox)."""
    repo = Path(repo)
    if not repo.is_dir():
        raise WorkspaceError(f"--repo {repo}: not a folder")
    for entry in sorted(repo.iterdir()):
        sandbox.copy_in(entry, workdir)


def snapshot_baseline(sandbox: Any, workdir: str) -> None:
    """Record the workspace as it is now; `diff()` compares against this."""
    git = _git(workdir)
    excludes = "\n".join(CACHE_PATTERNS)
    _run(
        sandbox,
        f"rm -rf {BASELINE_GIT_DIR} && git init -q --bare {BASELINE_GIT_DIR} && "
        f"printf '{excludes}\\n' >> {BASELINE_GIT_DIR}/info/exclude && "
        f"{git} add -A && {git} commit -q --allow-empty --no-verify -m baseline",
        "recording the starting state of the workspace",
    )


def diff(sandbox: Any, workdir: str) -> str:
    """A binary git patch of everything changed since the baseline (new files included).
    Written to a file and read back, so neither git's warnings nor output limits can corrupt it."""
    git = _git(workdir)
    _run(sandbox, f"{git} add -A && {git} diff --cached --binary HEAD > {DIFF_FILE}", "computing the workspace diff")
    return sandbox.read_file(DIFF_FILE).decode("utf-8", errors="surrogateescape")


def apply_patch(sandbox: Any, workdir: str, patch: str) -> None:
    """Re-apply a patch from `diff()` (resume: bring a fresh copy to where the run had got)."""
    if not patch.strip():
        return
    sandbox.write_file("/tmp/horizon-resume.patch", patch)
    _run(
        sandbox,
        f"cd {shlex.quote(workdir)} && git apply --binary --whitespace=nowarn /tmp/horizon-resume.patch",
        "re-applying the checkpointed workspace changes",
    )
