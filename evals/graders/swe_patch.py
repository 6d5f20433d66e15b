"""SWE-bench/DeepSWE grading from the agent's diff, in a fresh container with no network.

1. In the agent's container: stage everything and take `git diff --binary <base_commit>` — the
   model patch (also written to the trial folder and to predictions.jsonl by the runner).
2. In a fresh container from the same image: reset the files the patch touches to the base
   commit, apply the model patch (git apply, then `patch --fuzz`; failing both → failed, with the
   reason), reset and apply the test patch, run the listed tests with pytest -rA.
3. Resolved iff there is at least one FAIL_TO_PASS test, every one passed, and no PASS_TO_PASS
   test failed; a test missing from the report or skipped counts as failed (DeepSWE's rule).
"""

from __future__ import annotations

import re
import shlex

from evals.graders.base import Grade, GradeContext, VerifierCrashed
from evals.graders.pytest_summary import SummaryMissing, Outcome, parse_short_summary

EXCLUDES = "':(exclude)**/__pycache__/**' ':(exclude)*.pyc' ':(exclude).pytest_cache/**'"
_DIFF_PATHS = re.compile(r"^diff --git a/(\S+) b/(\S+)$", re.M)


def extract_model_patch(sb, repo_dir: str, base_commit: str) -> str:
    script = (
        f"cd {shlex.quote(repo_dir)} && git add -A -- . {EXCLUDES} >/dev/null 2>&1; "
        f"git diff --cached --binary {base_commit} > /tmp/model.patch"
    )
    result = sb.exec_once(["bash", "-c", script], timeout=120)
    if result.exit_code != 0:
        raise VerifierCrashed(f"could not take the diff in the agent's container: {result.output[-1000:]}")
    return sb.read_file("/tmp/model.patch").decode("utf-8", "replace")


def touched_files(patch: str) -> list[str]:
    return sorted({p for pair in _DIFF_PATHS.findall(patch) for p in pair})


def _reset(files: list[str], base: str) -> str:
    quoted = " ".join(shlex.quote(f) for f in files)
    return f"for f in {quoted}; do git checkout -q {base} -- \"$f\" 2>/dev/null || rm -f \"$f\"; done"


def grade(ctx: GradeContext) -> Grade:
    v = ctx.task.verifier
    patch = extract_model_patch(ctx.sandbox, v.repo_dir, v.base_commit)
    (ctx.trial_dir / "model.patch").write_text(patch, encoding="utf-8")
    details: dict = {"model_patch_bytes": len(patch.encode()), "model_patch": patch}
    with ctx.open_sandbox(ctx.env_image, workdir=v.repo_dir) as sb:
        sb.write_file("/tmp/model.patch", patch.encode())
        sb.write_file("/tmp/test.patch", v.test_patch.encode())
        if patch.strip():
            script = (
                f"cd {shlex.quote(v.repo_dir)} && {_reset(touched_files(patch), v.base_commit)} && "
                "(git apply --verbose /tmp/model.patch || patch --batch --forward --fuzz=5 -p1 -i /tmp/model.patch)"
            )
            applied = sb.exec_once(["bash", "-c", script], timeout=120)
            if applied.exit_code != 0:
                details["apply_failed"] = 1
                return Grade(False, 0.0, details, reason=f"patch does not apply: {applied.output.strip()[-800:]}")
        script = (
            f"cd {shlex.quote(v.repo_dir)} && {_reset(touched_files(v.test_patch), v.base_commit)} && "
            "git apply --verbose /tmp/test.patch"
        )
        applied = sb.exec_once(["bash", "-c", script], timeout=120)
        if applied.exit_code != 0:
            raise VerifierCrashed(f"the task's test patch does not apply: {applied.output.strip()[-800:]}")
        run = sb.exec_once(["bash", "-c", f"cd {shlex.quote(v.repo_dir)} && {v.test_command}"], timeout=ctx.timeout)
    (ctx.trial_dir / "test-output.txt").write_text(run.output, encoding="utf-8")
    try:
        statuses = {} if run.timed_out else parse_short_summary(run.output)
    except SummaryMissing:
        statuses = {}
    passed = {t for t, s in statuses.items() if s == Outcome.PASSED}
    f2p_failed = [t for t in v.fail_to_pass if t not in passed]
    p2p_failed = [t for t in v.pass_to_pass if t not in passed]
    resolved = bool(v.fail_to_pass) and not f2p_failed and not p2p_failed
    details.update(
        f2p=f"{len(v.fail_to_pass) - len(f2p_failed)}/{len(v.fail_to_pass)}",
        p2p=f"{len(v.pass_to_pass) - len(p2p_failed)}/{len(v.pass_to_pass)}",
        f2p_failed=f2p_failed,
        p2p_failed=p2p_failed,
        tests_timed_out=run.timed_out,
    )
    reason = None if resolved else ("tests timed out" if run.timed_out else
                                    f"{len(f2p_failed)} FAIL_TO_PASS and {len(p2p_failed)} PASS_TO_PASS tests failed")
    return Grade(resolved, 1.0 if resolved else 0.0, details, reason)
