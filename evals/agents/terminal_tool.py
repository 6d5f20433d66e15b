"""`terminal`: the horizon agent's tool for Terminal-Bench's tmux session.

Terminal-Bench agents act through a tmux session in the task container, and interactive programs
(wizards, editors, REPLs) only work there. The horizon agent keeps its regular tools (bash with
exit codes and timeouts, file editing) and gets this one for the terminal itself: type text and
key names into the session, wait, and read the screen back — the same channel the TB harness gives
Terminus, so a task needing keystrokes can be solved the way it was meant to be.
"""

from __future__ import annotations

import time

from pydantic import BaseModel, Field

from agent.tools.base import Tool, ToolContext, ToolResult
from evals.tmux import TmuxSession


class TerminalArgs(BaseModel):
    text: str = Field("", description="text typed literally into the terminal (may be empty)")
    enter: bool = Field(True, description="press Enter after the text")
    keys: list[str] = Field(default_factory=list, description="tmux key names sent after the text, e.g. ['C-c'] or ['Escape', ':', 'w', 'q', 'Enter']")
    wait_sec: float = Field(1.0, ge=0, le=600, description="seconds to wait before reading the screen")


class TerminalTool(Tool):
    """Type into the task's interactive terminal (a tmux session) and read its screen back.

    Use it for programs that need a real terminal or keystrokes (prompts, editors, REPLs).
    For ordinary commands, `bash` is simpler: it returns exit codes and full output."""

    name = "terminal"
    Args = TerminalArgs

    def __init__(self, ctx: ToolContext, session: TmuxSession):
        super().__init__(ctx)
        self.session = session

    def run(self, args: TerminalArgs) -> ToolResult:
        self.session.type_text(args.text, enter=args.enter)
        self.session.send_key_names(args.keys)
        time.sleep(args.wait_sec)
        screen = self.session.capture().rstrip()
        return ToolResult(output=f"[terminal screen]\n{screen}")
