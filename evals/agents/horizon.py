"""The horizon agent in the eval harness: the real agent loop, any model backend, the task's sandbox.

Each trial gets a fresh backend (a replay file restarts, an endpoint gets a new session), the
`embedded:` trials of one run sharing the agent's one loaded engine (`close()` stops it), the
built-in tools over the task's sandbox, plus `terminal` for Terminal-Bench tasks. The wall-clock
limit is the task's agent timeout; past it the agent is interrupted. Every event goes to the
trial's trajectory.jsonl as it happens.
"""

from __future__ import annotations

import threading
import weakref

from agent.backends import EnginePool, make_backend
from agent.config import AgentConfig
from agent.events import RunStart
from agent.instructions import build_system_prompt, load_project_instructions_from_sandbox
from agent.loop import Agent
from agent.tools import ToolContext
from agent.tools.registry import build_toolset
from agent.trajectory import TrajectoryWriter
from evals.agents.base import AgentContext, AgentOutcome
from evals.agents.terminal_tool import TerminalTool
from evals.results import TokenUsage


class HorizonAgent:
    name = "horizon"

    def __init__(self, model: str, overrides: dict | None = None):
        self.model = model
        self.overrides = dict(overrides or {})
        AgentConfig.model_validate({**self.overrides, "model": model})  # fail before any trial starts
        self.engines = EnginePool()
        # The eval runner keeps the agent for the whole run; without an explicit close() the
        # engines stop when the agent is collected or the process exits.
        self._finalizer = weakref.finalize(self, self.engines.close)

    def close(self) -> None:
        self._finalizer()

    def _config(self, ctx: AgentContext) -> AgentConfig:
        return AgentConfig.model_validate({**self.overrides, "model": self.model, "time_limit_s": max(1.0, ctx.remaining())})

    def run(self, ctx: AgentContext) -> AgentOutcome:
        config = self._config(ctx)
        backend = make_backend(self.model, config, self.engines)
        try:  # the same tools as `horizon run`: plugins and MCP servers of the [agent] config too
            tools, connections = build_toolset(config, ctx.sandbox, workdir=ctx.workdir)
        except BaseException:
            backend.close()
            raise
        if ctx.terminal is not None:
            tools.add(TerminalTool(ToolContext(ctx.sandbox, config.tools, ctx.workdir), ctx.terminal))
        path = ctx.log_dir / "trajectory.jsonl"
        writer = TrajectoryWriter(path)
        writer(RunStart(task=ctx.task.instruction, model=self.model,
                        settings={"task_id": ctx.task.id, "format": ctx.task.format, **config.model_dump(mode="json")}))
        # The task's own folder (not the default /workspace) and its AGENTS.md, as `horizon run` does.
        system_prompt = build_system_prompt(
            config, load_project_instructions_from_sandbox(ctx.sandbox, ctx.workdir), ctx.workdir
        )
        agent = Agent(config, backend, tools, on_event=writer, system_prompt=system_prompt)
        stop = threading.Event()
        watchdog = threading.Thread(target=lambda: stop.wait(ctx.remaining()) or agent.interrupt(), daemon=True)
        watchdog.start()
        try:
            result = agent.run(ctx.task.instruction)
        finally:
            stop.set()
            writer.close()
            tools.close()
            for conn in connections:
                conn.close()
            backend.close()
        usage = result.usage
        tokens = TokenUsage(input=usage.prompt_tokens, output=usage.completion_tokens, cached=usage.cached_tokens)
        reason = "timeout" if result.reason in ("interrupted", "time_limit") else result.reason
        error = result.summary if result.reason == "error" else None
        return AgentOutcome(tokens=tokens, finish_reason=reason, trajectory=str(path), error=error)
