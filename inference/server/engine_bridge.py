"""Engine handles are blocking iterators; the server is asyncio. One reader thread per request
moves deltas onto the event loop, and closing the async iterator early aborts the request."""

from __future__ import annotations

import asyncio
import threading
from typing import AsyncIterator

from inference.server.errors import APIError

_END = object()


def submit(engine, request) -> AsyncIterator:
    """Submit a GenerateRequest now (EngineError raises here) and return its StreamDeltas as an
    async iterator. Must be called on the event loop; close the iterator to abort the request."""
    loop = asyncio.get_running_loop()
    queue: asyncio.Queue = asyncio.Queue()
    handle = engine.submit(request)

    def put(item) -> None:
        try:
            loop.call_soon_threadsafe(queue.put_nowait, item)
        except RuntimeError:  # the event loop is gone (server shutting down)
            pass

    def pump() -> None:
        try:
            for delta in handle:
                put(delta)
            put(_END)
        except BaseException as exc:  # surfaced to the awaiting coroutine
            put(exc)

    threading.Thread(target=pump, name=f"horizon-stream-{handle.request_id}", daemon=True).start()
    return _iterate(engine, handle.request_id, queue)


def submit_or_400(engine, request) -> AsyncIterator:
    """`submit`, with a request the engine refuses reported as the client's error (400, its field)."""
    from inference.engine.request import EngineError

    try:
        return submit(engine, request)
    except EngineError as exc:
        raise APIError(400, str(exc), param=exc.field, code="invalid_value") from None


async def _iterate(engine, request_id: str, queue: asyncio.Queue) -> AsyncIterator:
    finished = False
    try:
        while True:
            item = await queue.get()
            if item is _END:
                finished = True
                return
            if isinstance(item, BaseException):
                finished = True
                raise item
            if item.finish_reason is not None:
                finished = True
            yield item
    finally:
        if not finished:
            # The client went away or the consumer stopped early: free the request's pages.
            engine.abort(request_id)
