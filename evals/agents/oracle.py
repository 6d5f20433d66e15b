"""The oracle agent applies each task's reference solution, the way the real harnesses do:
TB1 solution.sh and Harbor solve.sh are typed into the agent's tmux session as one blocking
command, keystroke solutions are replayed step by step, SWE tasks get the gold patch applied, and
CyberGym tasks submit the reference PoC with the task's own `submit.sh` (a script solution)."""

from __future__ import annotations

import shlex

from evals.agents.base import AgentContext, AgentOutcome
from evals.task import KeystrokeSolution, PatchSolution, ScriptSolution


class OracleAgent:
    name = "oracle"

    def run(self, ctx: AgentContext) -> AgentOutcome:
        solution = ctx.task.solution
        if solution is None:
            return AgentOutcome(finish_reason="no_solution", error="the task has no reference solution")
        if isinstance(solution, ScriptSolution):
            return self._script(ctx, solution)
        if isinstance(solution, KeystrokeSolution):
            return self._keystrokes(ctx, solution)
        if isinstance(solution, PatchSolution):
            return self._patch(ctx, solution)
        raise TypeError(f"unknown solution kind {type(solution).__name__}")

    def _script(self, ctx: AgentContext, s: ScriptSolution) -> AgentOutcome:
        ctx.sandbox.exec_once(["mkdir", "-p", s.container_dir], timeout=30)
        if s.source.is_dir():
            for child in sorted(s.source.iterdir()):
                ctx.sandbox.copy_in(child, f"{s.container_dir}/{child.name}")
        else:
            ctx.sandbox.copy_in(s.source, f"{s.container_dir}/{s.source.name}")
        if ctx.terminal is None:
            result = ctx.sandbox.exec_once(["bash", "-lc", s.entry], timeout=ctx.remaining())
            return AgentOutcome(finish_reason="timeout" if result.timed_out else "done")
        done = ctx.terminal.send_keys([s.entry, "Enter"], block=True, max_timeout_sec=ctx.remaining())
        return AgentOutcome(finish_reason="done" if done else "timeout")

    def _keystrokes(self, ctx: AgentContext, s: KeystrokeSolution) -> AgentOutcome:
        if ctx.terminal is None:
            return AgentOutcome(finish_reason="error", error="keystroke solutions need a terminal")
        for step in s.steps:
            keys = [step.command] + (["Enter"] if step.append_enter else [])
            ctx.terminal.send_keys(keys, block=step.block, min_timeout_sec=step.min_timeout_sec,
                                   max_timeout_sec=ctx.remaining())
        return AgentOutcome()

    def _patch(self, ctx: AgentContext, s: PatchSolution) -> AgentOutcome:
        ctx.sandbox.write_file("/tmp/gold.patch", s.patch.encode())
        result = ctx.sandbox.exec_once(
            ["bash", "-c", f"cd {shlex.quote(s.repo_dir)} && git apply --verbose /tmp/gold.patch && rm /tmp/gold.patch"],
            timeout=120,
        )
        if result.exit_code != 0:
            return AgentOutcome(finish_reason="error", error=f"gold patch did not apply: {result.output[-500:]}")
        return AgentOutcome()
