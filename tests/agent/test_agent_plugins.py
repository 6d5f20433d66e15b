"""Tool plugins: entry-point discovery of the example package, and MCP stdio servers on the host
(run_in="host"; servers in the sandbox are tested in test_agent_mcp_sandbox.py)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from agent.backends.replay import ReplayBackend
from agent.config import AgentConfig, MCPServerConfig
from agent.loop import Agent
from agent.tools.registry import PluginError, available_plugins, build_toolset
from agent_testkit import call, write_replay

MCP_SERVER = [sys.executable, str(Path(__file__).with_name("mcp_calc_server.py"))]


def test_example_plugin_is_discovered_from_its_entry_points():
    plugins = available_plugins()
    assert plugins["line_count"].value == "horizon_example_plugin.tools:LineCount"
    assert plugins["todo_scan"].value == "horizon_example_plugin.tools:todo_scan"


def test_enabled_plugins_join_the_tool_set_and_run_in_the_sandbox(sandbox, workdir):
    config = AgentConfig(plugins=["line_count", "todo_scan"], sandbox={"workdir": workdir})
    tools, _ = build_toolset(config, sandbox)
    assert {"bash", "finish", "line_count", "todo_scan"} <= set(tools.names)
    assert tools["line_count"].read_only
    spec = {s.name: s for s in tools.specs()}["todo_scan"]
    assert spec.description.startswith("List TODO/FIXME-style comments")
    assert spec.parameters["properties"]["tags"]["type"] == "array"
    tools.call("create", {"path": "a.py", "file_text": "x = 1  # TODO: fix\ny = 2\n"})
    assert tools.call("line_count", {"path": "a.py"}).output == "2 lines, 9 words, 25 chars"
    assert tools.call("todo_scan", {}).output.endswith("a.py:1:x = 1  # TODO: fix")
    invalid = tools.call("line_count", {})
    assert invalid.is_error and "path: required argument is missing" in invalid.output


def test_plugins_are_off_unless_enabled_and_unknown_names_fail_clearly(sandbox):
    tools, _ = build_toolset(AgentConfig(disabled_tools=["outline"]), sandbox)
    assert "line_count" not in tools and "outline" not in tools
    with pytest.raises(PluginError, match="'nope' is not an installed horizon.tools plugin.*line_count"):
        build_toolset(AgentConfig(plugins=["nope"]), sandbox)


def test_host_mcp_server_tools_are_called_by_the_agent(sandbox, tmp_path):
    # The calc server needs the mcp package, which only the host has: an explicit run_in="host".
    config = AgentConfig(mcp_servers={"calc": MCPServerConfig(command=MCP_SERVER, run_in="host")})
    tools, connections = build_toolset(config, sandbox)
    try:
        assert {"calc__add", "calc__divide"} <= set(tools.names)
        add = {s.name: s for s in tools.specs()}["calc__add"]
        assert add.description == "Add two integers." and add.parameters["required"] == ["a", "b"]
        script = write_replay(tmp_path / "s.jsonl", [
            {"tool_calls": [call("calc__add", a=2, b=40), call("calc__add", a="two", b=[]), call("calc__divide", a=1, b=0)]},
            {"tool_calls": [call("finish", summary="done")]},
        ])
        result = Agent(config, ReplayBackend(script), tools).run("add numbers")
        outputs = [m.content for m in result.messages if m.role == "tool"]
        assert outputs[0] == "42"
        assert "invalid arguments for calc__add" in outputs[1] and "- a: 'two' is not of type 'integer'" in outputs[1] and "- b: [] is not" in outputs[1]
        assert "division by zero" in outputs[2]
    finally:
        for conn in connections:
            conn.close()


def test_a_host_mcp_server_that_dies_at_start_is_reported_with_its_stderr(sandbox):
    from agent.mcp_tools import MCPError

    crash = [sys.executable, "-c", "import sys; sys.stderr.write('boom: no config file\\n'); sys.exit(3)"]
    config = AgentConfig(mcp_servers={"broken": MCPServerConfig(command=crash, startup_timeout_s=20, run_in="host")})
    with pytest.raises(MCPError, match=r"(?s)MCP server 'broken'.*boom: no config file"):
        build_toolset(config, sandbox)


def test_horizon_run_lists_builtin_tools_and_installed_plugins(capsys):
    from agent.cli.main import main

    assert main(["run", "--list-tools"]) == 0
    out = capsys.readouterr().out
    assert "str_replace" in out and "find_symbol" in out
    assert "line_count   horizon_example_plugin.tools:LineCount" in out
