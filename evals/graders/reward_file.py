"""Harbor grading: tests/test.sh writes /logs/verifier/reward.json (a flat name -> number map)
or reward.txt (one number); reward.json wins when both exist, as in Harbor's verifier.

`shared` mode runs in the agent's container. `separate` mode first runs the task's collect hooks
in the agent's container, carries /logs/artifacts (and nothing else) into a fresh container built
from tests/Dockerfile (or the task image), and grades there — the agent never sees that image.
"""

from __future__ import annotations

import json
import math
import shlex
import tempfile
from pathlib import Path

from evals.graders.base import Grade, GradeContext, VerifierCrashed
from evals.graders.verifier_environment import VerifierEnvironmentFailed, environment_failure

REWARD_DIR = "/logs/verifier"


def _parse_reward(json_text: str | None, txt: str | None) -> tuple[float, dict]:
    if json_text is not None:
        try:
            data = json.loads(json_text)
        except json.JSONDecodeError as exc:
            raise VerifierCrashed(f"reward.json is not JSON: {exc}") from exc
        if not isinstance(data, dict) or not data:
            raise VerifierCrashed("reward.json must be a non-empty flat object of numbers")
        for key, value in data.items():
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
                raise VerifierCrashed(f"reward.json: {key!r} is not a finite number ({value!r})")
        return float(data.get("reward", min(data.values()))), data
    if txt is not None:
        try:
            value = float(txt.strip())
        except ValueError as exc:
            raise VerifierCrashed(f"reward.txt does not hold a number: {txt.strip()[:100]!r}") from exc
        if not math.isfinite(value):
            raise VerifierCrashed(f"reward.txt is not finite: {value}")
        return value, {"reward": value}
    raise VerifierCrashed("the verifier wrote neither reward.json nor reward.txt")


def _read_optional(sb, path: str) -> str | None:
    probe = sb.exec_once(["test", "-f", path], timeout=30)
    return sb.read_file(path).decode("utf-8", "replace") if probe.exit_code == 0 else None


def _run_tests(ctx: GradeContext, sb) -> Grade:
    v = ctx.task.verifier
    sb.exec_once(["sh", "-c", f"rm -rf {REWARD_DIR} /tests && mkdir -p {REWARD_DIR} /tests /logs/artifacts"], timeout=30)
    for child in sorted(v.tests_dir.iterdir()):
        sb.copy_in(child, f"/tests/{child.name}")
    # As Harbor runs it: made executable and started directly, so its shebang picks the shell
    # (a POSIX-sh test.sh runs on an image without bash), with [verifier] env set.
    exports = " ".join(f"{k}={shlex.quote(val)}" for k, val in v.env.items())
    script = "chmod +x /tests/test.sh 2>/dev/null; " + (f"env {exports} " if exports else "") + "/tests/test.sh"
    result = sb.exec_once(["sh", "-c", script], timeout=ctx.timeout)
    (ctx.trial_dir / "verifier-output.txt").write_text(result.output, encoding="utf-8")
    if result.timed_out:
        return Grade(False, 0.0, {"failure_mode": "verifier_timeout"}, reason="the verifier timed out")
    environment = environment_failure(result.output)
    try:
        reward, metrics = _parse_reward(_read_optional(sb, f"{REWARD_DIR}/reward.json"),
                                        _read_optional(sb, f"{REWARD_DIR}/reward.txt"))
    except VerifierCrashed as exc:
        if environment:
            raise VerifierEnvironmentFailed(f"{exc}; the verifier's environment failed: {environment}") from None
        raise
    if reward < 0:
        raise VerifierCrashed(f"the verifier reported an infrastructure failure (reward {reward})")
    resolved = reward >= 1.0
    if not resolved and environment:
        # TB2's test.sh writes 0 when it could not even install pytest: not the agent's 0.
        raise VerifierEnvironmentFailed(f"reward {reward:g}, but the verifier's environment failed: {environment} "
                                        "(a task that fetches packages at grading time needs network: "
                                        "see --network and [verifier] network_mode)")
    return Grade(resolved, reward, {"metrics": metrics, "exit_code": result.exit_code},
                 None if resolved else f"reward {reward:g}")


def grade(ctx: GradeContext) -> Grade:
    v = ctx.task.verifier
    if v.environment_mode == "shared":
        return _run_tests(ctx, ctx.sandbox)
    agent_sb = ctx.sandbox
    agent_sb.exec_once(["mkdir", "-p", "/logs/artifacts"], timeout=30)
    for hook in v.collect:
        agent_sb.exec_once(["sh", "-c", hook.command], timeout=hook.timeout_sec)
    image = ctx.env_image
    if v.verifier_image is not None:
        image, notes = ctx.builder.ensure(v.verifier_image, f"{ctx.task.id}-verifier")
    with tempfile.TemporaryDirectory(prefix="horizon-artifacts-") as tmp:
        local = Path(tmp) / "artifacts"
        agent_sb.copy_out("/logs/artifacts", local)
        with ctx.open_sandbox(image) as verifier_sb:
            verifier_sb.exec_once(["mkdir", "-p", "/logs"], timeout=30)
            verifier_sb.copy_in(local, "/logs/artifacts")
            return _run_tests(ctx, verifier_sb)
