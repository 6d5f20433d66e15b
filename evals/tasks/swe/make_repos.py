"""Regenerate the sample SWE-style suite: five tiny pure-Python repositories with real git history.

Each repository gets an initial commit, a base commit (where the agent starts) and, on a `fix`
branch, the upstream-style fix with its tests. The bundle in repos/ carries every branch (the agent
image strips all but `main`), and instances.jsonl holds SWE-bench records whose `patch` and
`test_patch` are the fix commit's diffs, split into source and tests. Dates and identities are fixed,
so the commit ids are the same on every run: `python3 evals/tasks/swe/make_repos.py`.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

from swe_repo_sources import REPOS  # the file contents of each repository, commit by commit

HERE = Path(__file__).resolve().parent
OWNER = "horizon-samples"
# swebench has no specs for these repositories, so each instance registers its own (evals/swebench/specs.py).
SPECS = {"python": "3.11", "packages": "pytest", "test_cmd": "python -m pytest -rA -p no:cacheprovider",
         "log_parser": "parse_log_pytest"}


def git(repo: Path, *args: str, date: str = "2026-01-01T12:00:00Z") -> str:
    env = dict(os.environ, GIT_AUTHOR_NAME="Horizon Samples", GIT_AUTHOR_EMAIL="samples@horizon.local",
               GIT_COMMITTER_NAME="Horizon Samples", GIT_COMMITTER_EMAIL="samples@horizon.local",
               GIT_AUTHOR_DATE=date, GIT_COMMITTER_DATE=date, GIT_CONFIG_GLOBAL="/dev/null")
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True, env=env).stdout


def commit(repo: Path, files: dict[str, str], message: str, day: int) -> str:
    for name, text in files.items():
        path = repo / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", message, date=f"2026-01-{day:02d}T12:00:00Z")
    return git(repo, "rev-parse", "HEAD").strip()


def build(name: str, spec: dict, out_dir: Path) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        repo = Path(tmp) / name
        repo.mkdir()
        git(repo, "init", "-q", "-b", "main")
        for day, (message, files) in enumerate(spec["history"], 1):
            base = commit(repo, files, message, day)
        git(repo, "checkout", "-q", "-b", "fix")
        fix_files = {**spec["fix"], **spec["tests"]}
        fix = commit(repo, fix_files, spec["fix_message"], 20)
        git(repo, "checkout", "-q", "main")
        patch = git(repo, "diff", base, fix, "--", *spec["fix"])
        test_patch = git(repo, "diff", base, fix, "--", *spec["tests"])
        git(repo, "bundle", "create", "-q", str(out_dir / f"{OWNER}__{name}.bundle"), "--all")
    return {
        "instance_id": f"{OWNER}__{name}-1",
        "repo": f"{OWNER}/{name}",
        "base_commit": base,
        "problem_statement": spec["problem"],
        "patch": patch,
        "test_patch": test_patch,
        "FAIL_TO_PASS": json.dumps(spec["fail_to_pass"]),
        "PASS_TO_PASS": json.dumps(spec["pass_to_pass"]),
        "created_at": "2026-01-20T12:00:00Z",
        "version": "0.1",
        "specs": SPECS,
    }


def main() -> None:
    out_dir = HERE / "repos"
    out_dir.mkdir(exist_ok=True)
    records = [build(name, spec, out_dir) for name, spec in REPOS.items()]
    with open(HERE / "instances.jsonl", "w") as f:
        for record in records:
            f.write(json.dumps(record) + "\n")
    # The DeepSWE-layout sample (../swe-harbor/deepswe-slugs) is built on the same slugs repository.
    deepswe = HERE.parent / "swe-harbor" / "deepswe-slugs"
    for sub in ("environment", "tests"):
        shutil.copy(out_dir / f"{OWNER}__slugs.bundle", deepswe / sub / "repo.bundle")
    print(f"wrote {len(records)} instances and bundles to {HERE}")


if __name__ == "__main__":
    main()
