"""Plugin discovery and the assembly of a run's tool set.

A plugin package declares tools in the `horizon.tools` entry-point group:

    [project.entry-points."horizon.tools"]
    word_count = "my_package.tools:WordCount"

The entry point may name a `Tool` subclass, a list/tuple of them, or a function `(ctx) -> Tool |
list[Tool]` (for tools that need set-up). Installed plugins are only *available*; a run enables
them by name (`plugins = ["word_count"]` in the config), so installing a package never changes
what an existing configuration does.
"""

from __future__ import annotations

from importlib import metadata
from typing import Any

from agent.config import AgentConfig
from agent.tools.base import Tool, ToolContext
from agent.tools.builtins import make_builtin_tools
from agent.tools.toolset import ToolSet

ENTRY_POINT_GROUP = "horizon.tools"


class PluginError(RuntimeError):
    pass


def available_plugins() -> dict[str, metadata.EntryPoint]:
    return {ep.name: ep for ep in metadata.entry_points(group=ENTRY_POINT_GROUP)}


def load_plugin(name: str, ctx: ToolContext) -> list[Tool]:
    plugins = available_plugins()
    if name not in plugins:
        known = ", ".join(sorted(plugins)) or "none installed"
        raise PluginError(f"plugins: {name!r} is not an installed horizon.tools plugin (available: {known})")
    try:
        target: Any = plugins[name].load()
    except Exception as exc:
        raise PluginError(f"plugin {name!r} ({plugins[name].value}) failed to import: {exc}") from exc
    if isinstance(target, type) and issubclass(target, Tool):
        made: Any = target(ctx)
    elif isinstance(target, (list, tuple)):
        made = [cls(ctx) for cls in target]
    elif callable(target):
        made = target(ctx)
    else:
        raise PluginError(f"plugin {name!r}: entry point is {type(target).__name__}, not a Tool class or factory")
    tools = made if isinstance(made, (list, tuple)) else [made]
    for tool in tools:
        if not isinstance(tool, Tool):
            raise PluginError(f"plugin {name!r} produced {tool!r}, which is not a Tool")
    return list(tools)


def build_toolset(config: AgentConfig, sandbox: Any, *, start_mcp: bool = True,
                  workdir: str | None = None) -> tuple[ToolSet, list[Any]]:
    """Built-ins minus `disabled_tools`, plus enabled plugins, plus MCP server tools.
    `workdir` overrides config.sandbox.workdir (eval tasks bring their own, e.g. /app).
    Returns the tool set and the MCP connections to close after the run."""
    workdir = workdir or config.sandbox.workdir
    ctx = ToolContext(sandbox=sandbox, limits=config.tools, workdir=workdir)
    toolset = ToolSet(t for t in make_builtin_tools(sandbox, config.tools, workdir) if t.name not in config.disabled_tools)
    for name in config.plugins:
        for tool in load_plugin(name, ctx):
            if tool.name in toolset:
                raise PluginError(f"plugin {name!r} defines tool {tool.name!r}, which already exists")
            toolset.add(tool)
    connections: list[Any] = []
    if start_mcp and config.mcp_servers:
        from agent.mcp_tools import start_mcp_tools

        tools, connections = start_mcp_tools(config.mcp_servers, ctx)
        for tool in tools:
            toolset.add(tool)
    return toolset, connections
