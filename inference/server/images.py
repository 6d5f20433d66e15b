"""Image parts in API requests: refused by name where the model reads text only, decoded off the event loop.

Every route converts its image blocks into `ImagePart`s on the messages (chat: `image_url` parts;
Anthropic: `image` blocks; Responses: `input_image` parts), each knowing its name in the client's
request. Before a prompt is rendered, `decode_images` checks them against the engine's image
inputs (`engine.vision`, None on a text-only checkpoint) and decodes them on a worker thread, so a
large screenshot never stalls other requests' streams; the prompt render then finds them in the
image inputs' cache. Any failure is a 400 naming the part, for this request only.
"""

from __future__ import annotations

import asyncio
from typing import Any

from inference.chat.content_parts import ImagePart, ImagePartError
from inference.chat.messages import Message
from inference.server.errors import APIError


def image_inputs(state) -> Any:
    return getattr(state.engine, "vision", None)


def message_images(messages: list[Message]) -> list[tuple[str, ImagePart]]:
    return [(part.name(i), part) for i, m in enumerate(messages) for part in m.images or []]


def refuse(exc: ImagePartError) -> APIError:
    return APIError(400, str(exc), param=exc.where, code="invalid_image")


def text_only_error(where: str) -> APIError:
    return APIError(400, f"{where}: this model reads text only (its checkpoint has no vision tower); send text, "
                    "or serve a GLM-5.3-Flash checkpoint for images", param=where, code="unsupported_content")


async def decode_images(state, messages: list[Message]) -> None:
    """400 unless every image part can go to this model; decodes them into its cache meanwhile."""
    parts = message_images(messages)
    if not parts:
        return
    vision = image_inputs(state)
    if vision is None:
        raise text_only_error(parts[0][0])

    def work() -> None:
        for where, part in parts:
            vision.prepare(part.url, where)

    try:
        await asyncio.to_thread(work)
    except ImagePartError as exc:
        raise refuse(exc) from None
