"""MCP servers (stdio) as a second tool source.

    [mcp_servers.files]
    command = ["python3", "/opt/mcp/files_server.py"]
    run_in = "sandbox"          # the default; "host" is an explicit opt-in

Each configured server is started, its tools are listed once, and each becomes a Tool named
`NAME__TOOL` whose JSON schema is the server's input schema.

Where it runs: the model drives these tools, so by default the server runs where every tool runs,
inside the run's sandbox, as a long-lived `docker exec` whose stdin/stdout carry the JSON-RPC lines
(`agent.mcp_transport` over `sandbox.stdio_process`); the command must exist in the sandbox image.
`run_in = "host"` starts it as a host subprocess through the SDK's stdio client, for servers that
need host resources. A LocalSandbox has no container: there "sandbox" means the host too, and
an `MCPHostWarning` says so.

The MCP client is async; it lives on a private event loop in a background thread, and tool calls
hop onto that loop, so the agent loop stays synchronous.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import json
import re
import tempfile
import threading
import warnings
from typing import Any

import anyio
import jsonschema
import mcp_types
from mcp import Client
from mcp.shared.exceptions import MCPError as SDKError
from mcp.client.stdio import StdioServerParameters, stdio_client

from agent.config import MCPServerConfig
from agent.mcp_transport import stdio_process_transport
from agent.tools.base import Tool, ToolContext, ToolResult
from inference.chat.messages import ToolSpec
from sandbox import LocalSandbox, SandboxError
from sandbox.stdio_process import StdioProcess

_CLOSE_WAIT_S = 15.0  # the server's shutdown (close stdin, 2 s grace, kill) plus the client's


class MCPError(RuntimeError):
    """An MCP server could not be started, listed its tools wrongly, or failed during a call."""


class MCPHostWarning(UserWarning):
    """An MCP server configured to run in the sandbox runs on the host (the sandbox is a LocalSandbox)."""


class MCPConnection:
    """One running stdio MCP server and its client session."""

    def __init__(self, name: str, config: MCPServerConfig, sandbox: Any = None, workdir: str | None = None):
        self.name = name
        self.config = config
        self.tools: list[Any] = []  # mcp_types.Tool
        self.where = ""  # where the server runs, in words
        self._sandbox = sandbox
        self._workdir = workdir
        self._process: StdioProcess | None = None
        self._loop = asyncio.new_event_loop()
        self._client: Client | None = None
        self._ready = threading.Event()
        self._stop = asyncio.Event()
        self._serving: concurrent.futures.Future | None = None
        self._error: BaseException | None = None
        self._calls: set[concurrent.futures.Future] = set()
        self._calls_lock = threading.Lock()
        self._closed = False
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True, name=f"mcp-{name}")
        # A host server's stderr goes to a file of ours (never the process's stderr, which a test
        # harness or TUI may have replaced), and its tail explains a failure.
        self._stderr = (tempfile.TemporaryFile("w+", encoding="utf-8", errors="replace")
                        if config.run_in == "host" else None)

    def start(self) -> MCPConnection:
        if self.config.run_in == "sandbox":
            self._start_process()
        else:
            self.where = "the host (run_in = 'host')"
        self._thread.start()
        self._serving = asyncio.run_coroutine_threadsafe(self._serve(), self._loop)
        if not self._ready.wait(self.config.startup_timeout_s):
            message = (f"MCP server {self.name!r} did not start within {self.config.startup_timeout_s:g}s "
                       f"(in {self.where}){self._diagnosis()}")
            self.close()
            raise MCPError(message)
        if self._error is not None:
            message = (f"MCP server {self.name!r} ({' '.join(self.config.command)}, in {self.where}) failed: "
                       f"{type(self._error).__name__}: {self._error}{self._diagnosis()}")
            self.close()
            raise MCPError(message)
        return self

    def _start_process(self) -> None:
        if self._sandbox is None:
            raise MCPError(f"MCP server {self.name!r}: run_in = 'sandbox' needs the run's sandbox")
        try:
            self._process = StdioProcess.start(self._sandbox, self.config.command, env=self.config.env,
                                               workdir=self._workdir)
        except SandboxError as exc:
            raise MCPError(f"MCP server {self.name!r} could not be started in the sandbox: {exc}") from exc
        self.where = self._process.where
        if isinstance(self._sandbox, LocalSandbox):
            warnings.warn(
                f"MCP server {self.name!r} has run_in = 'sandbox', but the sandbox is a LocalSandbox: "
                "it runs on the host, as your user, without isolation", MCPHostWarning, stacklevel=3)

    def _transport(self):
        if self._process is not None:
            return stdio_process_transport(self._process)
        params = StdioServerParameters(
            command=self.config.command[0], args=self.config.command[1:], env=self.config.env or None
        )
        return stdio_client(params, errlog=self._stderr)

    async def _serve(self) -> None:
        try:
            async with anyio.create_task_group() as tasks:
                tasks.start_soon(self._cancel_on_stop, tasks.cancel_scope)
                async with Client(self._transport(), mode="legacy") as client:
                    cursor = None
                    while True:
                        page = await client.list_tools(cursor=cursor)
                        self.tools.extend(page.tools)
                        cursor = page.next_cursor
                        if not cursor:
                            break
                    self._client = client
                    self._ready.set()
                    await anyio.sleep_forever()
        except BaseException as exc:  # reported to the starting thread
            if not self._stop.is_set():
                self._error = _root_cause(exc)
        finally:
            self._client = None
            self._ready.set()

    async def _cancel_on_stop(self, scope: anyio.CancelScope) -> None:
        # Cancelling the scope (not the asyncio task) lets the transports' shielded shutdown run.
        await self._stop.wait()
        scope.cancel()

    def call(self, tool: str, arguments: dict[str, Any]) -> Any:
        client = self._client
        if client is None:
            raise MCPError(f"MCP server {self.name!r} is not running{self._diagnosis()}")
        future = asyncio.run_coroutine_threadsafe(
            client.call_tool(tool, arguments, read_timeout_seconds=self.config.call_timeout_s), self._loop
        )
        with self._calls_lock:
            self._calls.add(future)
        timed_out = MCPError(f"MCP server {self.name!r}: {tool} gave no answer within {self.config.call_timeout_s:g}s "
                             f"(mcp_servers.{self.name}.call_timeout_s)")
        try:
            return future.result(self.config.call_timeout_s + 5)
        except concurrent.futures.CancelledError:
            raise InterruptedError("interrupted by the user") from None
        except concurrent.futures.TimeoutError:
            future.cancel()
            raise timed_out from None
        except SDKError as exc:
            if exc.error.code == mcp_types.REQUEST_TIMEOUT:
                raise timed_out from None
            raise self._call_failure(tool, exc) from None
        except Exception as exc:  # noqa: BLE001 - explained with the server's state
            raise self._call_failure(tool, exc) from None
        finally:
            with self._calls_lock:
                self._calls.discard(future)

    def cancel_calls(self) -> None:
        """Abandon the calls in flight (a user interrupt); the SDK tells the server they were cancelled."""
        with self._calls_lock:
            calls = list(self._calls)
        for future in calls:
            future.cancel()

    def _call_failure(self, tool: str, exc: Exception) -> MCPError:
        if self._process is not None and self._process.exit_code() is not None:
            return MCPError(f"MCP server {self.name!r} exited during {tool}{self._diagnosis()}")
        return MCPError(f"MCP server {self.name!r}: {tool} failed: {exc}{self._diagnosis()}")

    def close(self) -> None:
        """Stop the session and the server (close stdin, wait, kill); idempotent."""
        if self._closed:
            return
        self._closed = True
        if self._serving is not None and self._loop.is_running():
            self._loop.call_soon_threadsafe(self._stop.set)
            try:
                self._serving.result(_CLOSE_WAIT_S)
            except BaseException:  # noqa: BLE001 - closing must not fail; the kill below still runs
                pass
        if self._loop.is_running():
            self._loop.call_soon_threadsafe(self._loop.stop)
        if self._thread.is_alive():
            self._thread.join(timeout=5)
        if self._process is not None:
            self._process.close()  # already done by the transport unless the session never started
        if self._stderr is not None:
            self._stderr.close()

    def _diagnosis(self) -> str:
        """The server's exit code and stderr tail, for error messages."""
        if self._process is not None:
            return self._process.describe_exit()
        if self._stderr is None:
            return ""
        try:
            self._stderr.seek(0)
            tail = self._stderr.read()[-1500:].strip()
        except (OSError, ValueError):
            return ""
        return f"\n--- server stderr ---\n{tail}" if tail else ""


def _root_cause(exc: BaseException) -> BaseException:
    """The one error inside nested task-group wrappers (whose own message says nothing)."""
    while isinstance(exc, BaseExceptionGroup) and len(exc.exceptions) == 1:
        exc = exc.exceptions[0]
    return exc


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

    def cancel(self) -> None:
        self.connection.cancel_calls()

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
            conn = MCPConnection(name, cfg, ctx.sandbox, ctx.workdir).start()
            connections.append(conn)
            tools.extend(MCPTool(ctx, conn, remote) for remote in conn.tools)
    except BaseException:
        for conn in connections:
            conn.close()
        raise
    return tools, connections
