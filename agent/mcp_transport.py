"""An MCP client transport over a StdioProcess: the server runs inside the run's sandbox.

The mcp SDK's client takes any async context manager that yields a pair of anyio streams
(incoming `SessionMessage | Exception`, outgoing `SessionMessage`). Stdio MCP is newline-delimited
JSON-RPC, so each message is one line of the process's stdin or stdout. The process's blocking
calls run in worker threads; reads wait at most a fraction of a second, so a cancelled session
never waits on a silent server.

When the server's stdout ends (it exited or crashed), the incoming stream closes, which fails the
requests in flight with the SDK's "Connection closed" error instead of leaving them hanging.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import anyio
import mcp_types
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream
from mcp.shared.message import SessionMessage

from sandbox.stdio_process import StdioProcess

Streams = tuple[MemoryObjectReceiveStream[SessionMessage | Exception], MemoryObjectSendStream[SessionMessage]]

logger = logging.getLogger(__name__)

_READ_POLL_S = 0.25  # how long one worker-thread read waits; bounds the reaction to cancellation


@asynccontextmanager
async def stdio_process_transport(process: StdioProcess, *, close_grace_s: float = 2.0) -> AsyncIterator[Streams]:
    """Yield (read, write) streams speaking MCP with `process`; on exit the process is closed
    (stdin closed, `close_grace_s` to exit, then killed with everything it started)."""
    incoming_writer, incoming = anyio.create_memory_object_stream[SessionMessage | Exception](0)
    outgoing, outgoing_reader = anyio.create_memory_object_stream[SessionMessage](0)

    async def pump_stdout() -> None:
        async with incoming_writer:
            while True:
                try:
                    line = await anyio.to_thread.run_sync(process.read_line, _READ_POLL_S)
                except TimeoutError:
                    continue
                except Exception as exc:  # noqa: BLE001 - a broken stream ends the session, with the reason
                    await _deliver(incoming_writer, exc)
                    return
                if line is None:
                    return
                if not line.strip():
                    continue
                if not await _deliver(incoming_writer, _parse(line)):
                    return

    async def pump_stdin() -> None:
        try:
            async with outgoing_reader:
                async for message in outgoing_reader:
                    text = message.message.model_dump_json(by_alias=True, exclude_unset=True)
                    await anyio.to_thread.run_sync(process.send_line, text)
        except Exception:  # noqa: BLE001 - the server is gone: end the session instead of hanging
            await incoming_writer.aclose()

    async with anyio.create_task_group() as tasks:
        tasks.start_soon(pump_stdout)
        tasks.start_soon(pump_stdin)
        try:
            yield incoming, outgoing
        finally:
            with anyio.CancelScope(shield=True):
                await outgoing.aclose()
                await incoming.aclose()
                await anyio.to_thread.run_sync(process.close, close_grace_s)
            tasks.cancel_scope.cancel()


async def _deliver(writer, item: SessionMessage | Exception) -> bool:
    try:
        await writer.send(item)
    except (anyio.ClosedResourceError, anyio.BrokenResourceError):
        return False  # the session is gone
    return True


def _parse(line: str) -> SessionMessage | Exception:
    """A message, or the parse error as a value for the session to report (a server printing
    anything but JSON-RPC on stdout breaks the protocol; the SDK's stdio client does the same)."""
    try:
        return SessionMessage(mcp_types.jsonrpc_message_adapter.validate_json(line, by_name=False))
    except ValueError as exc:
        logger.warning("MCP server wrote a line that is not JSON-RPC: %.200s", line)
        return exc
