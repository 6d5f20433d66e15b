from __future__ import annotations

from agent.batch.branches import commit_patch_to_branch
from agent.batch.jobs import BatchJob
from agent.batch.workspace import prepare_workspace


def test_fix_lands_on_a_branch_without_touching_the_users_checkout(small_repo, git_cmd):
    git = git_cmd
    (small_repo / "scratch.txt").write_text("user's uncommitted work\n")
    job = BatchJob(id="calc-1", repo=str(small_repo), task="fix add")
    ws = prepare_workspace(job)
    try:
        (ws.path / "calc.py").write_text("def add(a, b):\n    return a + b\n")
        (ws.path / "NOTES.md").write_text("new file\n")
        patch = ws.diff()
    finally:
        ws.remove()
    assert "+    return a + b" in patch and "NOTES.md" in patch
    commit = commit_patch_to_branch(small_repo, ws.base_commit, "horizon/calc-1", patch, "fix: calc-1")
    assert git(small_repo, "rev-parse", "horizon/calc-1") == commit
    assert git(small_repo, "show", "horizon/calc-1:calc.py").endswith("return a + b")
    assert git(small_repo, "rev-parse", "--abbrev-ref", "HEAD") == "main"
    assert (small_repo / "calc.py").read_text().endswith("return a - b\n")
    assert git(small_repo, "status", "--porcelain") == "?? scratch.txt"
