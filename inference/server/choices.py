"""Several choices for one request (`n` > 1): one engine request per choice, merged into one reply.

Each choice is its own engine request over the same prompt ids (after the first prefill the prefix
cache shares the prompt's pages); a seeded request gives choice i the seed `seed + i`, so choices
differ yet the reply is reproducible. Streaming interleaves the choices' chunks as they come, each
carrying its `index`; usage counts the prompt once and the completions of every choice.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any, AsyncIterator

from inference.server.replies import SSE_DONE


def seeded_for_choice(params, choice: int):
    """SamplingParams for choice `choice`: a seeded request's choice i samples with `seed + i`."""
    if choice and params.seed is not None:
        return params.model_copy(update={"seed": params.seed + choice})
    return params


@dataclass
class ChoiceEnd:
    """A choice's stream finished: its usage (engine `Usage`), for the merged usage chunk."""

    usage: Any


def merged_usage(usages: list[Any]) -> dict[str, Any] | None:
    if not usages or any(u is None for u in usages):
        return None
    first = usages[0]
    completion = sum(u.completion_tokens for u in usages)
    return {
        "prompt_tokens": first.prompt_tokens,
        "completion_tokens": completion,
        "total_tokens": first.prompt_tokens + completion,
        "prompt_tokens_details": {
            "cached_tokens": first.cached_tokens,
            "cached_tokens_device": first.cached_tokens_device,
            "cached_tokens_host": first.cached_tokens_host,
        },
    }


async def merge_streams(streams: list[AsyncIterator], usage_chunk) -> AsyncIterator[str]:
    """SSE chunks of every choice as they come, then `usage_chunk(merged usage dict)` (a string,
    or None to send nothing) and [DONE]. Closing this closes every choice (aborting its request)."""
    queue: asyncio.Queue = asyncio.Queue()
    finished = object()

    async def pump(stream: AsyncIterator) -> None:
        try:
            async for item in stream:
                await queue.put(item)
        except Exception as exc:  # handed to the consumer
            await queue.put(exc)
        finally:
            await queue.put(finished)

    tasks = [asyncio.ensure_future(pump(s)) for s in streams]
    usages: list[Any] = []
    try:
        remaining = len(streams)
        while remaining:
            item = await queue.get()
            if item is finished:
                remaining -= 1
            elif isinstance(item, Exception):
                raise item
            elif isinstance(item, ChoiceEnd):
                usages.append(item.usage)
            else:
                yield item
        usage = merged_usage(usages)
        extra = usage_chunk(usage) if usage is not None else None
        if extra:
            yield extra
        yield SSE_DONE
    finally:
        for task in tasks:
            task.cancel()
        for stream in streams:
            await stream.aclose()


async def merge_responses(streams: list[AsyncIterator]) -> AsyncIterator[dict]:
    """One response body from the choices' single-response streams: choices in index order."""
    async def first(stream: AsyncIterator) -> dict:
        async for item in stream:
            return item
        raise RuntimeError("a choice ended without a response")

    try:
        bodies = await asyncio.gather(*(first(s) for s in streams))
    finally:
        for stream in streams:
            await stream.aclose()
    merged = dict(bodies[0])
    merged["choices"] = [c for body in bodies for c in body["choices"]]
    usages = [body.get("usage") for body in bodies]
    if all(usages):
        completion = sum(u["completion_tokens"] for u in usages)
        merged["usage"] = {**usages[0], "completion_tokens": completion,
                           "total_tokens": usages[0]["prompt_tokens"] + completion}
    yield merged

