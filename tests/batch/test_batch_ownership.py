"""The agent works as root in its container, but the checkout it leaves behind (and the user's
repository, where --branch-prefix commits) belongs to the repository's owner, on the host.

The repositories here are owned by uid:gid 1234:1234 when the tests run as root (as `sudo horizon
batch` would meet a user's repository), else by the user running the tests, whom root-owned files
would lock out the same way."""

from __future__ import annotations

import io
import json
import os
import shutil
import tempfile
import threading
import time
from pathlib import Path

import pytest

from agent.batch.cli import docker_sandbox_factory
from agent.batch.execute import JobSettings
from agent.batch.jobs import BatchJob
from agent.batch.runner import BatchRunner
from agent.cli.main import main
from agent.config import AgentConfig
from .helpers import BUGGY_CALC, CALC_TEST, call, git, make_repo, step, write_replay

pytestmark = [pytest.mark.docker, pytest.mark.slow]

OWNER = (1234, 1234) if os.geteuid() == 0 else (os.getuid(), os.getgid())


@pytest.fixture
def open_tmp():
    """A scratch folder other users can reach (pytest's own tmp_path is private to the test user),
    as a user's repository and a batch's output folder normally are."""
    path = Path(tempfile.mkdtemp(prefix="horizon-ownership-"))
    path.chmod(0o755)
    yield path
    shutil.rmtree(path)


def owned_repo(path: Path) -> Path:
    make_repo(path, {"calc.py": BUGGY_CALC, "test_calc.py": CALC_TEST})
    for p in [path, *path.rglob("*")]:
        os.lchown(p, *OWNER)
    return path


def foreign_paths(root: Path) -> list[str]:
    """Every path under `root` (itself included, symlinks not followed) not owned by OWNER."""
    out = []
    for p in [root, *root.rglob("*")]:
        st = p.lstat()
        if (st.st_uid, st.st_gid) != OWNER:
            out.append(f"{p.relative_to(root)} {st.st_uid}:{st.st_gid}")
    return out


# New file in a new folder, a folder made by a command, an edit, a symlink, and a `git commit`
# (whose object folders the host's git must write into afterwards).
AGENT_WORK = [
    step(call("create", path="docs/notes/FIX.md", file_text="add() subtracted\n"),
         call("str_replace", path="calc.py", old_str="a - b", new_str="a + b")),
    step(call("bash", command="mkdir -p build/out && echo log > build/out/run.log && ln -s /etc/hostname host-link"
                              " && git add -A && git commit -qm 'agent wip' && echo committed")),
]


def test_the_checkout_and_the_repository_stay_the_owners(open_tmp, docker_client):
    tmp_path = open_tmp
    repo = owned_repo(tmp_path / "repos" / "calc")
    slow = owned_repo(tmp_path / "repos" / "slow")
    replays = tmp_path / "replays"
    replays.mkdir()
    jobs = [
        {"id": "fix", "repo": str(repo), "task": "fix add", "test": "python3 test_calc.py",
         "model": write_replay(replays / "fix.jsonl", [*AGENT_WORK, step(call("finish", summary="fixed"))])},
        # Killed by its time limit mid-command: its own sandbox is gone before anyone can chown.
        {"id": "killed", "repo": str(slow), "task": "fix add", "limits": {"timeout_s": 5},
         "model": write_replay(replays / "slow.jsonl", [
             *AGENT_WORK, step(call("bash", command="sleep 600", timeout=900)), step(call("finish", summary="-"))])},
    ]
    jobs_file = tmp_path / "jobs.jsonl"
    jobs_file.write_text("".join(json.dumps(j) + "\n" for j in jobs))
    out = tmp_path / "out"

    code = main(["batch", str(jobs_file), "--out", str(out), "-j", "2", "--keep-workspaces", "--branch-prefix", "fix/"])

    results = {r["id"]: r for r in map(json.loads, (out / "results.jsonl").read_text().splitlines())}
    assert code == 1 and results["fix"]["status"] == "fixed"
    assert (results["killed"]["status"], results["killed"]["reason"]) == ("error", "timed out after 5s")
    for job_id, result in results.items():
        checkout = out / "jobs" / job_id / "workspace"
        assert result["workspace"] == str(checkout) and result["warnings"] == []
        # What the agent made is there, and all of it (and .git) is the owner's.
        assert (checkout / "docs" / "notes" / "FIX.md").is_file() and (checkout / "build" / "out" / "run.log").is_file()
        assert (checkout / "host-link").is_symlink() and "a + b" in (checkout / "calc.py").read_text()
        assert git(checkout, "-c", "safe.directory=*", "log", "-1", "--format=%s") == "agent wip"
        assert foreign_paths(checkout) == [], job_id
        # The patch was read after the agent's commit, by the owner's git.
        patch = (out / "jobs" / job_id / "patch.diff").read_text()
        assert "+add() subtracted" in patch and "+log" in patch and "+    return a + b" in patch

    # The fix landed on a branch of the user's repository, written as the user.
    assert results["fix"]["branch"] == "fix/fix"
    assert git(repo, "-c", "safe.directory=*", "show", "fix/fix:docs/notes/FIX.md") == "add() subtracted"
    assert foreign_paths(repo) == []


def test_a_stopped_batch_also_gives_the_checkout_back(open_tmp, docker_client):
    """Ctrl-C / SIGTERM: the running job's sandbox is killed mid-command and the job is not
    recorded; the checkout it leaves (kept here, so it can be inspected) is still the owner's."""
    repo = owned_repo(open_tmp / "repo")
    replay = write_replay(open_tmp / "slow.jsonl", [*AGENT_WORK, step(call("bash", command="sleep 600", timeout=900))])
    job = BatchJob(id="stopped", repo=str(repo), task="fix add", model=replay)
    settings = JobSettings(model=None, config=AgentConfig(), base_dir=open_tmp, keep_workspaces=True,
                           sandbox_factory=docker_sandbox_factory(None, AgentConfig()))
    out = open_tmp / "out"
    runner = BatchRunner([job], [], settings, out, stream=io.StringIO())
    trajectory = out / "jobs" / "stopped" / "trajectory.jsonl"
    batch = threading.Thread(target=runner.run)
    batch.start()
    try:
        deadline = time.monotonic() + 120
        while not (trajectory.exists() and "sleep 600" in trajectory.read_text()):
            assert time.monotonic() < deadline, "the job never started its long command"
            time.sleep(0.2)
    finally:
        runner.stop()
        batch.join(120)
    assert not batch.is_alive()
    assert not (out / "results.jsonl").exists()  # not recorded: --resume reruns it
    checkout = out / "jobs" / "stopped" / "workspace"
    assert (checkout / "build" / "out" / "run.log").is_file()
    assert foreign_paths(checkout) == []
