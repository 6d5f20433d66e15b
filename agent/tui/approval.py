"""Approval modes: which tool calls wait for the user.

    ask        every command or edit waits for y / n / always-for-this-tool
    auto-edit  edits apply, commands ask
    auto       everything runs (in the sandbox)

Read-only tools (the `read_only` annotation on the tool) never ask.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal, get_args

ApprovalMode = Literal["ask", "auto-edit", "auto"]
MODES: tuple[str, ...] = get_args(ApprovalMode)
EDIT_TOOLS = frozenset({"create", "str_replace", "insert"})


@dataclass
class ApprovalPolicy:
    mode: ApprovalMode = "ask"
    read_only_tools: frozenset[str] = frozenset()
    always_allowed: set[str] = field(default_factory=set)

    def needs_user(self, tool_name: str) -> bool:
        if tool_name in self.read_only_tools or tool_name in self.always_allowed:
            return False
        if self.mode == "auto":
            return False
        if self.mode == "auto-edit" and tool_name in EDIT_TOOLS:
            return False
        return True

    def cycle(self) -> ApprovalMode:
        self.mode = MODES[(MODES.index(self.mode) + 1) % len(MODES)]
        return self.mode
