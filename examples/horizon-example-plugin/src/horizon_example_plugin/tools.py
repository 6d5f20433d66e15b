"""Two small tools showing both ways to write a Horizon tool.

`LineCount` subclasses `Tool`; `todo_scan` is a plain function turned into a tool by
`function_tool`. Both run their work inside the sandbox through `ctx.sandbox`.
"""

from __future__ import annotations

import shlex

from pydantic import BaseModel, Field

from agent.tools import Tool, ToolContext, ToolResult, function_tool


class LineCountArgs(BaseModel):
    path: str = Field(description="file to measure (relative to the workspace)")


class LineCount(Tool):
    """Count the lines, words and characters of a file in the workspace."""

    name = "line_count"
    Args = LineCountArgs
    read_only = True  # approval front-ends may run it without asking

    def run(self, args: LineCountArgs) -> ToolResult:
        data = self.ctx.sandbox.read_file(self.ctx.resolve(args.path))
        text = data.decode("utf-8", errors="replace")
        return ToolResult(output=f"{len(text.splitlines())} lines, {len(text.split())} words, {len(text)} chars")


class TodoScanArgs(BaseModel):
    path: str = Field(".", description="folder to scan (default: the workspace)")
    tags: list[str] = Field(default_factory=lambda: ["TODO", "FIXME"], description="markers to look for")


@function_tool(read_only=True)
def todo_scan(args: TodoScanArgs, ctx: ToolContext) -> ToolResult:
    """List TODO/FIXME-style comments under a folder as path:line: text."""
    pattern = r"\b(" + "|".join(args.tags) + r")\b"
    target = ctx.shell_path(args.path)  # relative to the workspace: works in Docker and LocalSandbox
    result = ctx.run_once(f"grep -rnIE --exclude-dir=.git {shlex.quote(pattern)} {shlex.quote(target)} | head -n 100")
    return ToolResult(output=result.output.strip() or "no markers found")
