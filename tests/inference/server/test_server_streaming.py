"""The SSE delivery shared by the Anthropic and Responses routes: keepalives while the generation is
silent, errors in-band once streaming, the in-flight count restored, the generation closed."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

from inference.server.errors import APIError
from inference.server.streaming import sse_response


def _collect(response) -> list[str]:
    async def run():
        return [chunk async for chunk in response.body_iterator]

    return asyncio.run(run())


def test_keepalive_while_silent_then_data():
    state = SimpleNamespace(inflight=0)
    released = asyncio.Event()
    closed = []

    async def stream():
        try:
            await released.wait()  # silent until the client has seen a keepalive
            yield "data: 1\n\n"
        finally:
            closed.append(True)

    async def run():
        response = sse_response(state, stream(), lambda exc: "error", keepalive=": ka\n\n", keepalive_s=0.01)
        assert state.inflight == 1
        out = []
        async for chunk in response.body_iterator:
            out.append(chunk)
            if chunk == ": ka\n\n":
                released.set()
        return out

    out = asyncio.run(run())
    assert out[0] == ": ka\n\n" and out[-1] == "data: 1\n\n" and set(out[:-1]) == {": ka\n\n"}
    assert state.inflight == 0 and closed == [True]


def test_errors_become_events():
    state = SimpleNamespace(inflight=0)

    async def failing():
        yield "data: first\n\n"
        raise APIError(400, "bad thing")

    async def crashing():
        yield "data: first\n\n"
        raise RuntimeError("boom")

    shown = lambda exc: f"event: error\ndata: {exc.status} {exc.message}\n\n"  # noqa: E731
    assert _collect(sse_response(state, failing(), shown)) == ["data: first\n\n", "event: error\ndata: 400 bad thing\n\n"]
    out = _collect(sse_response(state, crashing(), shown))
    assert out[1].startswith("event: error\ndata: 500 internal error: RuntimeError: boom")
    assert state.inflight == 0
