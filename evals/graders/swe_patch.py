"""The model patch of a SWE-style trial: everything the agent changed, as one git diff.

In the agent's container, stage everything (build artefacts excluded) and take
`git diff --cached --binary <base>`; grading (evals/swebench/grader.py) replays it elsewhere.
"""

from __future__ import annotations

import re
import shlex

from evals.graders.base import VerifierCrashed

EXCLUDES = "':(exclude)**/__pycache__/**' ':(exclude)*.pyc' ':(exclude).pytest_cache/**'"
_DIFF_PATHS = re.compile(r"^diff --git a/(\S+) b/(\S+)$", re.M)


def extract_model_patch(sb, repo_dir: str, base_commit: str, exclude: list[str] | tuple = ()) -> str:
    """`exclude`: paths left out besides build artefacts (files already untracked in the image)."""
    extra = " ".join(shlex.quote(f":(exclude,literal){p}") for p in exclude)
    script = (
        f"cd {shlex.quote(repo_dir)} && git add -A -- . {EXCLUDES} {extra} >/dev/null 2>&1; "
        f"git diff --cached --binary {base_commit} > /tmp/model.patch"
    )
    result = sb.exec_once(["bash", "-c", script], timeout=120)
    if result.exit_code != 0:
        raise VerifierCrashed(f"could not take the diff in the agent's container: {result.output[-1000:]}")
    return sb.read_file("/tmp/model.patch").decode("utf-8", "replace")


def touched_files(patch: str) -> list[str]:
    return sorted({p for pair in _DIFF_PATHS.findall(patch) for p in pair})
