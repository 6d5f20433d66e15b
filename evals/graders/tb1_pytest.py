"""Terminal-Bench 1.x grading: run-tests.sh in the agent's container, pytest's summary decides.

The TB harness types `bash /tests/run-tests.sh` into a fresh tmux session and reads the pane; we run
the same script as a separate process and read its output, which carries the same summary without
depending on the pane's scroll-back. Resolved only if every parsed test passed; a missing summary
or a test timeout is unresolved (TB's PARSE_ERROR / TEST_TIMEOUT), not an infrastructure error.
"""

from __future__ import annotations

from evals.graders.base import Grade, GradeContext
from evals.graders.pytest_summary import SummaryMissing, parse_short_summary, tb1_resolved


def grade(ctx: GradeContext) -> Grade:
    v = ctx.task.verifier
    sb = ctx.sandbox
    sb.exec_once(["mkdir", "-p", "/tests"], timeout=30)
    if v.tests_dir is not None:
        for child in sorted(v.tests_dir.iterdir()):
            sb.copy_in(child, f"/tests/{child.name}")
    sb.copy_in(v.run_tests, "/tests/run-tests.sh")
    result = sb.exec_once(["bash", "-lc", "bash /tests/run-tests.sh"], timeout=ctx.timeout)
    (ctx.trial_dir / "verifier-output.txt").write_text(result.output, encoding="utf-8")
    if result.timed_out:
        return Grade(False, 0.0, {"failure_mode": "TEST_TIMEOUT"}, reason="tests timed out")
    try:
        tests = parse_short_summary(result.output)
    except SummaryMissing as exc:
        return Grade(False, 0.0, {"failure_mode": "PARSE_ERROR", "exit_code": result.exit_code}, reason=str(exc))
    resolved = tb1_resolved(tests)
    details = {"tests": {k: v.value for k, v in tests.items()}, "exit_code": result.exit_code}
    return Grade(resolved, 1.0 if resolved else 0.0, details, None if resolved else "not every test passed")
