"""Harbor multi-step tasks (`[[steps]]`): steps run in order in one container, as Harbor's
MultiStepTrial runs them.

Each step copies steps/<name>/workdir/ into the working folder (running its setup.sh), gives the agent
steps/<name>/instruction.md (the oracle its solution/, else the task's), then grades with its tests/
(else the task's). A step whose rewards fall below its `min_reward` (a number: the `reward` key; a
table: every key named) ends the trial there. The trial's rewards are the per-key mean over the steps
that were graded (missing keys count 0), or the last step's with `multi_step_reward_strategy =
"final"`. Each step's files go to trials/<task>/attempt-<k>/step-<i>-<name>/.
"""

from __future__ import annotations

import shlex
from pathlib import Path

from evals.agents.base import AgentOutcome
from evals.graders.base import Grade
from evals.task import TaskStep, Timeouts


def _below(metrics: dict, min_reward) -> str | None:
    wanted = {"reward": min_reward} if isinstance(min_reward, (int, float)) else dict(min_reward or {})
    for key, threshold in wanted.items():
        actual = metrics.get(key)
        if actual is None or actual < threshold:
            return f"{key}={actual} below min_reward {threshold}"
    return None


def _aggregate(graded: list[dict], strategy: str) -> dict:
    if strategy == "final":
        return dict(graded[-1])
    keys = {k for m in graded for k in m}
    return {k: sum(m.get(k, 0.0) for m in graded) / len(graded) for k in sorted(keys)}


def _prepare(trial, sb, step: TaskStep, workdir: str) -> None:
    from evals.trial import InfraError

    if step.workdir_files is None:
        return
    for child in sorted(step.workdir_files.iterdir()):
        sb.copy_in(child, f"{workdir.rstrip('/')}/{child.name}")
    if (step.workdir_files / "setup.sh").is_file():
        setup = sb.exec_once(["sh", "-c", f"cd {shlex.quote(workdir)} && if command -v bash >/dev/null; then bash ./setup.sh; else sh ./setup.sh; fi"], timeout=600)
        if setup.exit_code != 0:
            raise InfraError("agent_setup_failed", f"step {step.name!r}: setup.sh exited {setup.exit_code}: "
                                                   f"{setup.output.strip()[-500:]}")


def run_steps(trial, sb, tag: str, workdir: str) -> tuple[AgentOutcome, Grade]:
    """Run every step of `trial.task` in `sb`; the combined outcome and grade."""
    task, trial_dir, timeouts = trial.task, trial.trial_dir, trial.timeouts
    scale = timeouts.agent_sec / task.timeouts.agent_sec
    outcome = AgentOutcome()
    graded: list[dict] = []
    report: list[dict] = []
    try:
        for i, step in enumerate(task.steps):
            trial.trial_dir = Path(trial_dir) / f"step-{i}-{step.name}"
            trial.trial_dir.mkdir(parents=True, exist_ok=True)
            trial.task = task.model_copy(update={"instruction": step.instruction, "solution": step.solution,
                                                 "verifier": step.verifier})
            trial.timeouts = Timeouts(build_sec=timeouts.build_sec, verifier_sec=timeouts.verifier_sec,
                                      agent_sec=(step.agent_sec * scale) if step.agent_sec else timeouts.agent_sec)
            if i and task.terminal:  # a fresh terminal per step, as each step's agent run is its own
                sb.exec_once(["tmux", "kill-session", "-t", "agent"], timeout=30)
            _prepare(trial, sb, step, workdir)
            step_outcome = trial._run_agent(sb, workdir)
            outcome.tokens = outcome.tokens.add(step_outcome.tokens)
            outcome.finish_reason = step_outcome.finish_reason
            outcome.error = outcome.error or step_outcome.error
            outcome.trajectory = step_outcome.trajectory or outcome.trajectory
            grade = trial._grade(sb, tag)
            metrics = dict(grade.details.get("metrics") or {"reward": grade.reward})
            graded.append(metrics)
            report.append({"name": step.name, "reward": grade.reward, "metrics": metrics,
                           "finish_reason": step_outcome.finish_reason})
            stop = _below(metrics, step.min_reward) if step.min_reward is not None else None
            if stop:
                report[-1]["stopped"] = stop
                break
    finally:
        trial.task, trial.trial_dir, trial.timeouts = task, trial_dir, timeouts
    metrics = _aggregate(graded, task.multi_step_reward_strategy)
    reward = float(metrics.get("reward", min(metrics.values())))
    resolved = reward >= 1.0
    details = {"metrics": metrics, "steps": report, "strategy": task.multi_step_reward_strategy}
    return outcome, Grade(resolved, reward, details, None if resolved else f"reward {reward:g} over {len(graded)} "
                                                                          f"of {len(task.steps)} steps")
