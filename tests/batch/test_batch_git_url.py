"""Jobs that name a git URL instead of a checkout. No network here, but `file://` URLs of bare
repositories are real git URLs: the job clones over git's transport, checks out its base ref
(an older commit, or a ref a plain clone does not fetch, like a pull request head) and records
the patch against that commit."""

from __future__ import annotations

import json
import subprocess

import pytest

from agent.cli.main import main
from .helpers import call, git, make_repo, step, write_replay

pytestmark = [pytest.mark.docker, pytest.mark.slow]


def commit(repo, text: str, message: str) -> str:
    (repo / "version.txt").write_text(text)
    git(repo, "commit", "-q", "-am", message)
    return git(repo, "rev-parse", "HEAD")


@pytest.fixture
def bare_repo(tmp_path):
    """main: v1 -> v2; a pull-request head v3 that only `refs/pull/7/head` reaches."""
    work = make_repo(tmp_path / "work", {"version.txt": "v1\n"})
    first = git(work, "rev-parse", "HEAD")
    commit(work, "v2\n", "second")
    git(work, "checkout", "-q", "-b", "pr")
    pr_head = commit(work, "v3\n", "pull request")
    bare = tmp_path / "upstream.git"
    git(tmp_path, "clone", "-q", "--bare", str(work), str(bare))
    git(bare, "update-ref", "refs/pull/7/head", pr_head)
    git(bare, "branch", "-q", "-D", "pr")
    return bare, {"first": first, "pr": pr_head}


def bump(version: str) -> list[dict]:
    """Show the file, then replace exactly the version the job's base ref has: on any other
    commit str_replace finds no match and the job ends with no change."""
    return [
        step(call("bash", command="cat version.txt")),
        step(call("str_replace", path="version.txt", old_str=f"{version}\n", new_str=f"{version}-fixed\n")),
        step(call("finish", summary=f"bumped {version}")),
    ]


def test_jobs_on_git_urls_run_on_their_base_commit(tmp_path, docker_client, bare_repo):
    bare, commits = bare_repo
    url = f"file://{bare}"
    replays = tmp_path / "replays"
    replays.mkdir()
    jobs = [
        {"id": "url-commit", "repo": url, "base_ref": commits["first"], "task": "bump the version",
         "test": "grep -qx v1-fixed version.txt", "model": write_replay(replays / "v1.jsonl", bump("v1"))},
        {"id": "url-pr-ref", "repo": url, "base_ref": "refs/pull/7/head", "task": "bump the version",
         "test": "grep -qx v3-fixed version.txt", "model": write_replay(replays / "v3.jsonl", bump("v3"))},
        # A bare repository named by its path is a local repository, not an invalid one.
        {"id": "bare-path", "repo": str(bare), "base_ref": "main", "task": "bump the version",
         "model": write_replay(replays / "v2.jsonl", bump("v2"))},
    ]
    jobs_file = tmp_path / "jobs.jsonl"
    jobs_file.write_text("".join(json.dumps(j) + "\n" for j in jobs))
    out = tmp_path / "out"

    assert main(["batch", str(jobs_file), "--out", str(out), "-j", "3", "--branch-prefix", "fix/"]) == 0

    results = {r["id"]: r for r in map(json.loads, (out / "results.jsonl").read_text().splitlines())}
    assert {k: r["status"] for k, r in results.items()} == {"url-commit": "fixed", "url-pr-ref": "fixed",
                                                            "bare-path": "fixed"}
    # A URL is never pushed to: no branch, and the result says why instead of staying silent.
    assert results["url-commit"].get("branch") is None
    assert any("no branch fix/url-commit" in w for w in results["url-commit"]["warnings"])
    assert results["bare-path"]["branch"] == "fix/bare-path" and git(bare, "rev-parse", "fix/bare-path")
    main_head = git(bare, "rev-parse", "main")
    assert results["url-commit"]["base_commit"] == commits["first"]
    assert results["url-pr-ref"]["base_commit"] == commits["pr"]
    assert results["bare-path"]["base_commit"] == main_head
    for job_id, base, version in [("url-commit", commits["first"], "v1"), ("url-pr-ref", commits["pr"], "v3"),
                                  ("bare-path", main_head, "v2")]:
        job_dir = out / "jobs" / job_id
        # The agent saw the base commit's file...
        outputs = [e["output"] for e in map(json.loads, (job_dir / "trajectory.jsonl").read_text().splitlines())
                   if e["type"] == "tool_output" and e["name"] == "bash"]
        assert outputs and outputs[0].strip().startswith(version), (job_id, outputs)
        # ...and its recorded patch applies to exactly that commit.
        patch = (job_dir / "patch.diff").read_text()
        assert f"-{version}\n+{version}-fixed\n" in patch
        check = tmp_path / f"check-{job_id}"
        git(tmp_path, "clone", "-q", str(bare), str(check))
        git(check, "fetch", "-q", "origin", base)
        git(check, "checkout", "-q", "--detach", base)
        subprocess.run(["git", "-C", str(check), "apply", "--index"], input=patch, text=True, check=True)
        assert (check / "version.txt").read_text() == f"{version}-fixed\n"


def test_a_base_ref_the_url_does_not_have_is_an_error_with_the_reason(tmp_path, docker_client, bare_repo):
    bare, _ = bare_repo
    replay = write_replay(tmp_path / "never.jsonl", [step(call("finish", summary="x"))])
    jobs_file = tmp_path / "jobs.jsonl"
    jobs_file.write_text(json.dumps({"id": "no-such-ref", "repo": f"file://{bare}", "base_ref": "release-9",
                                     "task": "x", "model": replay}) + "\n")
    out = tmp_path / "out"

    assert main(["batch", str(jobs_file), "--out", str(out)]) == 1

    result = json.loads((out / "results.jsonl").read_text())
    assert result["status"] == "error"
    assert result["reason"].startswith("preparing the repository failed: base_ref 'release-9'")
    assert result["base_commit"] is None and (out / "jobs" / "no-such-ref" / "patch.diff").read_text() == ""
