"""The repository inside a sandbox: copy it in, remember its starting state, diff against it.

The starting state is committed to a private git directory outside the workspace, so the
repository's own `.git` (if any) is left exactly as it was, the agent's git commands see the real
history, and `diff()` is the change the agent made relative to what was copied in — uncommitted
changes of the original included. `.gitignore` is honoured and caches are excluded, so build
outputs do not end up in the patch. The patch applies to the original with `git apply`.
Commands run with the workspace as their working directory and `--work-tree=.`, which works the
same in a container and in a LocalSandbox.
"""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

PATCH_TIMEOUT_S = 300
# Caches that tests and builds drop into the tree; never part of the agent's change.
CACHE_PATTERNS = ("__pycache__/", "*.py[co]", ".pytest_cache/", ".mypy_cache/", ".ruff_cache/", ".hypothesis/")


class WorkspaceError(RuntimeError):
    pass


class SandboxWorkspace:
    def __init__(self, sandbox: Any, workdir: str):
        self.sandbox = sandbox
        self.workdir = workdir
        tag = uuid.uuid4().hex[:12]
        self.git_dir = f"/tmp/horizon-baseline-{tag}.git"
        self.diff_file = f"/tmp/horizon-diff-{tag}.patch"

    def _git(self) -> str:
        return (f"git --git-dir={self.git_dir} --work-tree=. -c user.name=horizon -c user.email=horizon@localhost "
                "-c core.autocrlf=false -c 'safe.directory=*'")

    def _run(self, script: str, what: str) -> str:
        result = self.sandbox.exec_once(["bash", "-c", script], timeout=PATCH_TIMEOUT_S, workdir=self.workdir)
        if result.exit_code != 0:
            raise WorkspaceError(f"{what} failed (exit {result.exit_code}): {result.output.strip()[-1000:]}")
        return result.output

    def copy_in(self, repo: str | Path) -> None:
        """Copy the contents of a host folder into the workspace (which already exists)."""
        repo = Path(repo)
        if not repo.is_dir():
            raise WorkspaceError(f"--repo {repo}: not a folder")
        for entry in sorted(repo.iterdir()):
            self.sandbox.copy_in(entry, self.workdir)

    def snapshot(self) -> None:
        """Record the workspace as it is now; `diff()` compares against this."""
        git = self._git()
        excludes = "\\n".join(CACHE_PATTERNS)
        self._run(
            f"rm -rf {self.git_dir} && git init -q --bare {self.git_dir} && "
            f"printf '{excludes}\\n' >> {self.git_dir}/info/exclude && "
            f"{git} add -A && {git} commit -q --allow-empty --no-verify -m baseline",
            "recording the starting state of the workspace",
        )

    def diff(self) -> str:
        """A binary git patch of everything changed since the snapshot (new files included).
        Written to a file and read back, so neither git's warnings nor output limits can corrupt it."""
        git = self._git()
        self._run(f"{git} add -A && {git} diff --cached --binary HEAD > {self.diff_file}", "computing the workspace diff")
        return self.sandbox.read_file(self.diff_file).decode("utf-8", errors="surrogateescape")

    def apply(self, patch: str) -> None:
        """Re-apply a patch from `diff()` (resume: bring a fresh copy to where the run had got)."""
        if not patch.strip():
            return
        self.sandbox.write_file(self.diff_file, patch)
        self._run(f"git apply --binary --whitespace=nowarn {self.diff_file}", "re-applying the checkpointed changes")

    def cleanup(self) -> None:
        try:
            self.sandbox.exec_once(["rm", "-rf", self.git_dir, self.diff_file], timeout=60)
        except Exception:  # the sandbox may already be gone; its /tmp goes with it
            pass
