"""Delivery of a generation to the client, shared by every route that generates: an SSE
response that keeps the connection alive and reports failures in-band, and a non-streaming driver
that aborts the generation when the client goes away."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import AsyncIterator, Callable, Optional

from fastapi import Request
from fastapi.responses import StreamingResponse

from inference.server.errors import APIError

log = logging.getLogger("horizon.server")


def sse_response(state, stream: AsyncIterator[str], error_event: Callable[[APIError], str],
                 keepalive: Optional[str] = None, keepalive_s: float = 10.0) -> StreamingResponse:
    """Stream `stream`'s SSE strings. While nothing comes for `keepalive_s` (a long prefill), send
    `keepalive` so proxies and client read timeouts do not cut the connection. Once the status
    line is out an error can only be an event: `error_event(APIError)`."""
    state.inflight += 1  # the stream outlives the handler's admission scope

    async def body():
        pending = None
        try:
            while True:
                pending = pending or asyncio.ensure_future(stream.__anext__())
                done, _ = await asyncio.wait({pending}, timeout=keepalive_s if keepalive else None)
                if not done:
                    yield keepalive
                    continue
                try:
                    item = pending.result()
                except StopAsyncIteration:
                    pending = None
                    return
                pending = None
                yield item
        except APIError as exc:
            yield error_event(exc)
        except Exception as exc:  # the status line is sent already: report in-band, keep serving
            log.exception("stream failed")
            yield error_event(APIError(500, f"internal error: {type(exc).__name__}: {exc}", code="internal_error"))
        finally:
            state.inflight -= 1
            if pending is not None and not pending.done():
                pending.cancel()
                with contextlib.suppress(asyncio.CancelledError, StopAsyncIteration, Exception):
                    await pending
            await stream.aclose()

    return StreamingResponse(body(), media_type="text/event-stream",
                             headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})


async def until_disconnected(request: Request, stream: AsyncIterator):
    """The first item of a non-streaming generation; abort it if the client disconnects first."""
    task = asyncio.ensure_future(stream.__anext__())
    try:
        while True:
            done, _ = await asyncio.wait({task}, timeout=0.25)
            if done:
                return task.result()
            if await request.is_disconnected():
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError, StopAsyncIteration):
                    await task
                raise APIError(499, "client disconnected", code="client_closed")
    finally:
        await stream.aclose()
