"""The nop agent does nothing: a valid task must not be solved by its untouched environment."""

from __future__ import annotations

from evals.agents.base import AgentContext, AgentOutcome


class NopAgent:
    name = "nop"

    def run(self, ctx: AgentContext) -> AgentOutcome:
        return AgentOutcome(finish_reason="nop")
