"""Tools: the plugin API (`Tool`, `function_tool`, `ToolContext`, `ToolResult`), the `ToolSet`,
the built-in tools (`builtin_tools`) and plugin discovery (`agent.tools.registry`)."""

from agent.tools.base import Tool, ToolContext, ToolResult, function_tool
from agent.tools.toolset import ToolSet

__all__ = ["Tool", "ToolContext", "ToolResult", "ToolSet", "builtin_tools", "function_tool"]


def builtin_tools(sandbox, limits=None, workdir: str = "/workspace") -> list[Tool]:
    """bash, view, create, str_replace, insert, search, outline, find_symbol and finish."""
    from agent.tools.builtins import make_builtin_tools

    return make_builtin_tools(sandbox, limits, workdir)
