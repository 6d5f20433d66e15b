"""Workspace snapshots at the start of every chat turn, so /undo reverts a whole turn.

The edit tools' own undo (workspace_ops.EditHistory) cannot see what a bash command changed. Here
the workspace is captured before each turn as a git tree in a private repository inside the
sandbox (GIT_DIR outside the workspace, its own index), so:
- the user's repository (its .git, index, HEAD, objects) is never written;
- the workspace's ignore rules apply (.gitignore files and the repository's info/exclude), so
  build outputs and dependencies are neither stored nor removed;
- after the first snapshot, git's index only rehashes files whose stat changed: cheap per turn.
Restoring checks the snapshot's files out and removes files the turn created (git clean over the
snapshot's index). Commits the agent made stay in the repository's history; only files revert.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass

SNAPSHOT_GIT_DIR = "/tmp/horizon-turns.git"


@dataclass
class TurnSnapshot:
    tree: str  # git tree id of the workspace at the start of the turn
    turn: int


def _env(workdir: str) -> str:
    g = SNAPSHOT_GIT_DIR
    return (f"export GIT_DIR={g} GIT_WORK_TREE={shlex.quote(workdir)} GIT_INDEX_FILE={g}/index "
            "GIT_CONFIG_NOSYSTEM=1 HOME=/tmp; ")


class TurnSnapshots:
    def __init__(self, sandbox, workdir: str, timeout: float = 120.0):
        self.sandbox = sandbox
        self.workdir = workdir
        self.timeout = timeout
        self.stack: list[TurnSnapshot] = []
        self.error: str | None = None  # why snapshots are unavailable (no git, read-only...)

    def take(self, turn: int) -> bool:
        """Snapshot the workspace before `turn`; False (with `error` set) when it cannot be done."""
        w = shlex.quote(self.workdir)
        script = (
            _env(self.workdir) + "set -e; command -v git >/dev/null || { echo 'git is not installed'; exit 3; }; "
            f"[ -d {SNAPSHOT_GIT_DIR} ] || git init -q; "
            f"if [ -f {w}/.git/info/exclude ]; then cp {w}/.git/info/exclude {SNAPSHOT_GIT_DIR}/info/exclude; fi; "
            "git add -A -- . >/dev/null 2>&1 && git write-tree"
        )
        r = self.sandbox.exec_once(script, timeout=self.timeout, workdir=self.workdir)
        tree = r.output.strip().splitlines()[-1] if r.output.strip() else ""
        if r.exit_code != 0 or len(tree) != 40:
            self.error = (r.output.strip() or f"exit code {r.exit_code}")[-300:]
            return False
        if self.stack and self.stack[-1].tree == tree:
            self.stack[-1].turn = turn  # nothing changed since: the older snapshot stands for both
        else:
            self.stack.append(TurnSnapshot(tree, turn))
        self.error = None
        return True

    def undo(self) -> tuple[int | None, str]:
        """Restore the workspace to the newest snapshot that differs from it now. Returns (the turn
        whose start it was restored to, or None when nothing was done; a message for the user)."""
        current = self._current_tree()
        while self.stack and self.stack[-1].tree == current:
            self.stack.pop()  # the last turn changed nothing: undo the one before it
        if not self.stack:
            return None, "nothing to undo: the workspace is as it was before your first message"
        snap = self.stack.pop()
        script = (
            _env(self.workdir) + f"set -e; git read-tree {snap.tree}; git update-index -q --refresh >/dev/null || true; "
            "changed=$(git diff-files --name-only | wc -l); git checkout-index -a -f; "
            "removed=$(git clean -fd -n | wc -l); git clean -fdq; echo \"$changed $removed\""
        )
        r = self.sandbox.exec_once(script, timeout=self.timeout, workdir=self.workdir)
        if r.exit_code != 0:
            self.stack.append(snap)
            return None, f"undo failed: {r.output.strip()[-300:]}"
        changed, removed = (r.output.split() + ["0", "0"])[:2]
        return snap.turn, (f"restored the workspace to before turn {snap.turn}: {changed} file(s) reverted, "
                      f"{removed} created file(s) removed")

    def _current_tree(self) -> str | None:
        r = self.sandbox.exec_once(_env(self.workdir) + "git add -A -- . >/dev/null 2>&1 && git write-tree",
                                   timeout=self.timeout, workdir=self.workdir)
        tree = r.output.strip()
        return tree if r.exit_code == 0 and len(tree) == 40 else None

    def clear(self) -> None:
        self.stack.clear()
