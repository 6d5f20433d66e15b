"""MCP servers (stdio) as a second tool source.

Each configured server is started on the host as a subprocess (`[mcp_servers.NAME] command = [...]`),
its tools are listed once, and each becomes a Tool named `NAME__TOOL` whose JSON schema is the
server's input schema. The MCP client is async; it lives on a private event loop in a background
thread, and tool calls hop onto that loop, so the agent loop stays synchronous.
"""

from __future__ import annotations

import asyncio
import json
import re
import tempfile
import threading
from typing import Any

import jsonschema
from mcp import Client
from mcp.client.stdio import StdioServerParameters, stdio_client

from agent.config import MCPServerConfig
from agent.tools.base import Tool, ToolContext, ToolResult
from inference.chat.messages import ToolSpec


class MCPError(RuntimeError):
    """An MCP server could not be started or listed its tools wrongly."""


class MCPConnection:
    """One running stdio MCP server and its client session."""

    def __init__(self, name: str, config: MCPServerConfig):
        self.name = name
        self.config = config
        self.tools: list[Any] = []  # mcp_types.Tool
        self._loop = asyncio.new_event_loop()
        self._client: Client | None = None
        self._ready = threading.Event()
        self._stop: asyncio.Event | None = None
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True, name=f"mcp-{name}")
        # The server's stderr goes to a file of ours (never the process's stderr, which a test
        # harness or TUI may have replaced), and its tail explains a failed start.
        self._stderr = tempfile.TemporaryFile("w+", encoding="utf-8", errors="replace")

    def start(self) -> MCPConnection:
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self._serve(), self._loop)
        if not self._ready.wait(self.config.startup_timeout_s):
            self.close()
            raise MCPError(f"MCP server {self.name!r} did not start within {self.config.startup_timeout_s:g}s")
        if self._error is not None:
            message = (f"MCP server {self.name!r} ({' '.join(self.config.command)}) failed: "
                       f"{type(self._error).__name__}: {self._error}{self._stderr_tail()}")
            self.close()
            raise MCPError(message)
        return self

    async def _serve(self) -> None:
        self._stop = asyncio.Event()
        params = StdioServerParameters(
            command=self.config.command[0], args=self.config.command[1:], env=self.config.env or None
        )
        try:
            async with Client(stdio_client(params, errlog=self._stderr), mode="legacy") as client:
                self._client = client
                cursor = None
                while True:
                    page = await client.list_tools(cursor=cursor)
                    self.tools.extend(page.tools)
                    cursor = page.next_cursor
                    if not cursor:
                        break
                self._ready.set()
                await self._stop.wait()
        except BaseException as exc:  # reported to the starting thread
            self._error = exc
        finally:
            self._client = None
            self._ready.set()

    def call(self, tool: str, arguments: dict[str, Any]) -> Any:
        if self._client is None:
            raise MCPError(f"MCP server {self.name!r} is not running")
        future = asyncio.run_coroutine_threadsafe(
            self._client.call_tool(tool, arguments, read_timeout_seconds=self.config.call_timeout_s), self._loop
        )
        return future.result(self.config.call_timeout_s + 5)

    def close(self) -> None:
        if self._stop is not None and self._loop.is_running():
            self._loop.call_soon_threadsafe(self._stop.set)
            # Let the client shut the server down (close stdin, wait, kill) before the loop stops.
            done = threading.Event()
            self._loop.call_soon_threadsafe(lambda: asyncio.ensure_future(self._after_stop(done)))
            done.wait(10)
        if self._loop.is_running():
            self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=5)
        self._stderr.close()

    def _stderr_tail(self) -> str:
        try:
            self._stderr.seek(0)
            tail = self._stderr.read()[-1500:].strip()
        except (OSError, ValueError):
            return ""
        return f"\n--- server stderr ---\n{tail}" if tail else ""

    async def _after_stop(self, done: threading.Event) -> None:
        while self._client is not None:
            await asyncio.sleep(0.02)
        done.set()


def tool_name(server: str, tool: str) -> str:
    return re.sub(r"[^A-Za-z0-9_-]", "_", f"{server}__{tool}")


class MCPTool(Tool):
    """A tool served by an MCP server (name, description and schema come from the server)."""

    manages_timeout = True  # the MCP call has its own timeout

    def __init__(self, ctx: ToolContext, connection: MCPConnection, remote: Any):
        super().__init__(ctx)
        self.connection = connection
        self.remote_name = remote.name
        self.name = tool_name(connection.name, remote.name)  # type: ignore[misc]
        self.read_only = bool(remote.annotations and remote.annotations.read_only_hint)  # type: ignore[misc]
        self._description = remote.description or f"{remote.name} (from MCP server {connection.name})"
        self._schema = dict(remote.input_schema or {"type": "object", "properties": {}})
        self._schema.setdefault("type", "object")

    def spec(self) -> ToolSpec:  # type: ignore[override]
        return ToolSpec(name=self.name, description=self._description, parameters=self._schema)

    def parameters(self) -> dict[str, Any]:  # type: ignore[override]
        return self._schema

    def validate(self, raw_args: dict[str, Any]) -> dict[str, Any]:  # type: ignore[override]
        validator = jsonschema.validators.validator_for(self._schema)(self._schema)
        errors = sorted(validator.iter_errors(raw_args), key=lambda e: list(map(str, e.absolute_path)))
        if errors:
            lines = [f"- {'.'.join(map(str, e.absolute_path)) or '(arguments)'}: {e.message}" for e in errors]
            raise _SchemaError(f"invalid arguments for {self.name}:\n" + "\n".join(lines))
        return raw_args

    def run(self, args: dict[str, Any]) -> ToolResult:
        result = self.connection.call(self.remote_name, args)
        parts = []
        for item in result.content or []:
            text = getattr(item, "text", None)
            parts.append(text if text is not None else f"[{getattr(item, 'type', 'content')} omitted]")
        if not parts and result.structured_content is not None:
            parts.append(json.dumps(result.structured_content, ensure_ascii=False))
        return ToolResult(output="\n".join(parts), is_error=bool(result.is_error))


class _SchemaError(ValueError):
    pass


def start_mcp_tools(servers: dict[str, MCPServerConfig], ctx: ToolContext) -> tuple[list[Tool], list[MCPConnection]]:
    """Start every configured server; return its tools and the connections (close them after the run)."""
    tools: list[Tool] = []
    connections: list[MCPConnection] = []
    try:
        for name, cfg in servers.items():
            conn = MCPConnection(name, cfg).start()
            connections.append(conn)
            tools.extend(MCPTool(ctx, conn, remote) for remote in conn.tools)
    except BaseException:
        for conn in connections:
            conn.close()
        raise
    return tools, connections
