"""The built-in tool set: bash, view, create, str_replace, insert, search, outline, find_symbol, finish."""

from __future__ import annotations

from typing import TYPE_CHECKING

from pydantic import BaseModel, Field

from agent.config import ToolLimits
from agent.tools.base import Tool, ToolContext, ToolResult
from agent.tools.code_index import CodeIndex
from agent.tools.code_nav import FindSymbolTool, OutlineTool
from agent.tools.files import CreateTool, InsertTool, StrReplaceTool, ViewTool
from agent.tools.search import SearchTool
from agent.tools.shell import BashTool

if TYPE_CHECKING:
    from sandbox import Sandbox


class FinishArgs(BaseModel):
    summary: str = Field(description="what you did and why, in a few sentences")


class FinishTool(Tool):
    """Call this once the task is complete (the changes are made and checked). Ends the run."""

    name = "finish"
    Args = FinishArgs
    read_only = True

    def run(self, args: FinishArgs) -> ToolResult:
        return ToolResult(output="finished", finish=True, summary=args.summary)


BUILTIN_TOOL_CLASSES: tuple[type[Tool], ...] = (
    BashTool, ViewTool, CreateTool, StrReplaceTool, InsertTool, SearchTool, OutlineTool, FindSymbolTool, FinishTool,
)


def make_builtin_tools(sandbox: Sandbox, limits: ToolLimits | None = None, workdir: str = "/workspace") -> list[Tool]:
    ctx = ToolContext(sandbox=sandbox, limits=limits or ToolLimits(), workdir=workdir)
    index = CodeIndex()  # shared by outline and find_symbol
    tools: list[Tool] = []
    for cls in BUILTIN_TOOL_CLASSES:
        tools.append(cls(ctx, index) if cls in (OutlineTool, FindSymbolTool) else cls(ctx))
    return tools
