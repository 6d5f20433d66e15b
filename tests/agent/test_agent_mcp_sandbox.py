"""MCP stdio servers run inside the run's sandbox by default (run_in = "sandbox").

The server is plain Python (the image has no mcp package and no network), copied into the shared
sandbox; what it reports (its pid, hostname, files it can read) shows where it really runs.
"""

from __future__ import annotations

import json
import os
import socket
import sys
import threading
import uuid
from pathlib import Path

import pytest

from agent.backends.replay import ReplayBackend
from agent.config import AgentConfig, ConfigError, MCPServerConfig, load_config
from agent.loop import Agent
from agent.mcp_tools import MCPConnection, MCPError, MCPHostWarning
from agent.tools.registry import build_toolset
from agent_testkit import call, write_replay

PLAIN_SERVER = Path(__file__).with_name("mcp_plain_server.py")
SERVER_IN_SANDBOX = "/opt/horizon-test/mcp_plain_server.py"


@pytest.fixture(scope="module")
def server(sandbox) -> list[str]:
    """argv of the plain MCP server inside the shared sandbox."""
    sandbox.write_file(SERVER_IN_SANDBOX, PLAIN_SERVER.read_text(encoding="utf-8"))
    return ["python3", SERVER_IN_SANDBOX]


def server_processes(sandbox) -> dict[int, str]:
    """pid -> command line of the test server's processes (and its sleeping child) in the container."""
    listing = sandbox.exec_once(["ps", "-eo", "pid=,args="], timeout=30).output
    found = {}
    for line in listing.splitlines():
        pid, _, args = line.strip().partition(" ")
        if "mcp_plain_server" in args or "time.sleep(600)" in args or args == "sleep 600":
            found[int(pid)] = args
    return found


def test_servers_run_in_the_sandbox_unless_the_config_opts_into_the_host():
    assert MCPServerConfig(command=["srv"]).run_in == "sandbox"
    assert MCPServerConfig(command=["srv"], run_in="host").run_in == "host"
    with pytest.raises(ConfigError, match=r"mcp_servers\.fs\.run_in: got 'docker'; input should be 'sandbox' or 'host'"):
        load_config(None, {"mcp_servers.fs.command": ["srv"], "mcp_servers.fs.run_in": "docker"})
    with pytest.raises(ConfigError, match=r"mcp_servers\.fs\.env: .*'A=B' is not one"):
        load_config(None, {"mcp_servers.fs.command": ["srv"], "mcp_servers.fs.env": {"A=B": "1"}})


def test_the_agent_calls_tools_of_a_server_that_runs_in_the_container(sandbox, workdir, server, tmp_path):
    marker = f"/tmp/only-in-the-container-{uuid.uuid4().hex}"
    sandbox.write_file(marker, "written in the container")
    assert not Path(marker).exists()
    config = AgentConfig(mcp_servers={"plain": MCPServerConfig(command=server, env={"GREETING": "hi from the config"})},
                         sandbox={"workdir": workdir})
    tools, connections = build_toolset(config, sandbox)
    try:
        assert {"plain__whoami", "plain__read_file", "plain__add", "plain__crash"} <= set(tools.names)
        assert tools["plain__whoami"].read_only and not tools["plain__add"].read_only
        assert connections[0].where == f"container {sandbox.container_id[:12]}"
        script = write_replay(tmp_path / "s.jsonl", [
            {"tool_calls": [call("plain__whoami"), call("plain__read_file", path=marker),
                            call("plain__add", a=2, b=40), call("plain__add", a="two", b=1)]},
            {"tool_calls": [call("finish", summary="done")]},
        ])
        result = Agent(config, ReplayBackend(script), tools).run("where does the server run?")
        outputs = [m.content for m in result.messages if m.role == "tool"]
        who = json.loads(outputs[0])
        running = server_processes(sandbox)
        # Its pid is the server's pid in the container's pid namespace, and it sees the container's name.
        assert "mcp_plain_server" in running[who["pid"]]
        assert who["nodename"] == sandbox.exec_once(["hostname"], timeout=30).output.strip()
        assert who["nodename"] != socket.gethostname()
        assert who["cwd"] == workdir and who["greeting"] == "hi from the config"
        assert outputs[1] == "written in the container"
        assert outputs[2] == "42"
        assert "invalid arguments for plain__add" in outputs[3] and "'two' is not of type 'integer'" in outputs[3]
    finally:
        for conn in connections:
            conn.close()
    assert server_processes(sandbox) == {}


def test_closing_kills_a_server_that_ignores_eof_and_the_children_it_detached(sandbox, server):
    stubborn = MCPServerConfig(command=[*server, "--ignore-eof", "--spawn-child"])
    conn = MCPConnection("stubborn", stubborn, sandbox, "/workspace").start()
    try:
        assert conn.call("add", {"a": 1, "b": 2}).content[0].text == "3"
        assert len(server_processes(sandbox)) == 2  # the server and its child in its own session
    finally:
        conn.close()
    assert server_processes(sandbox) == {}


def test_a_server_that_crashes_mid_call_gives_a_tool_error_with_its_exit_code_and_stderr(sandbox, server):
    config = AgentConfig(mcp_servers={"plain": MCPServerConfig(command=server)})
    tools, connections = build_toolset(config, sandbox)
    try:
        crashed = tools.call("plain__crash", {})
        assert crashed.is_error
        assert "MCP server 'plain' exited during crash (exit code 3)" in crashed.output
        assert "crashing on purpose in the middle of a call" in crashed.output
        after = tools.call("plain__add", {"a": 1, "b": 1})
        assert after.is_error and "exited during add (exit code 3)" in after.output
    finally:
        for conn in connections:
            conn.close()
    assert server_processes(sandbox) == {}


def test_a_slow_call_times_out_with_a_clear_error_and_an_interrupt_stops_waiting(sandbox, server):
    config = AgentConfig(mcp_servers={"plain": MCPServerConfig(command=server, call_timeout_s=0.5)})
    tools, connections = build_toolset(config, sandbox)
    try:
        slow = tools.call("plain__sleep", {"seconds": 1.5})
        assert slow.is_error
        assert "MCP server 'plain': sleep gave no answer within 0.5s (mcp_servers.plain.call_timeout_s)" in slow.output
        connections[0].config.call_timeout_s = 30
        timer = threading.Timer(0.3, tools.cancel)
        timer.start()
        interrupted = tools.call("plain__sleep", {"seconds": 1.5})
        timer.join()
        assert interrupted.is_error and interrupted.output == "plain__sleep: interrupted by the user"
        assert tools.call("plain__add", {"a": 2, "b": 3}).output == "5"  # the session outlived both
    finally:
        for conn in connections:
            conn.close()


def test_servers_that_fail_to_start_in_the_sandbox_are_reported_and_leave_nothing_running(sandbox, server):
    where = f"in container {sandbox.container_id[:12]}"
    broken = AgentConfig(mcp_servers={"broken": MCPServerConfig(command=[*server, "--crash-at-start"])})
    with pytest.raises(MCPError, match=rf"(?s)MCP server 'broken' .*{where}.*exit code 3.*cannot open its configuration"):
        build_toolset(broken, sandbox)
    missing = AgentConfig(mcp_servers={"missing": MCPServerConfig(command=["no-such-mcp-server"])})
    with pytest.raises(MCPError, match=r"(?s)exit code 127.*no-such-mcp-server.*No such file or directory"):
        build_toolset(missing, sandbox)
    silent = AgentConfig(mcp_servers={"silent": MCPServerConfig(command=["sleep", "600"], startup_timeout_s=1)})
    with pytest.raises(MCPError, match=rf"MCP server 'silent' did not start within 1s \({where}\)"):
        build_toolset(silent, sandbox)
    assert server_processes(sandbox) == {}


def test_with_a_local_sandbox_the_server_runs_on_the_host_and_a_warning_says_so():
    from sandbox import LocalSandbox

    config = AgentConfig(mcp_servers={"plain": MCPServerConfig(command=[sys.executable, str(PLAIN_SERVER)])})
    with LocalSandbox() as local:
        with pytest.warns(MCPHostWarning, match="'plain' has run_in = 'sandbox', but the sandbox is a LocalSandbox"):
            tools, connections = build_toolset(config, local)
        try:
            assert "the host" in connections[0].where
            who = json.loads(tools.call("plain__whoami", {}).output)
            assert who["cwd"] == str(local.workdir)
            os.kill(who["pid"], 0)  # a host process
        finally:
            for conn in connections:
                conn.close()
        with pytest.raises(ProcessLookupError):
            os.kill(who["pid"], 0)
