"""Image files for the model: `@shot.png` attachments in a task or chat message, and `view` on an image.

Bytes are read the way the agent's file tools read (through the sandbox, or from the host checkout
in `horizon chat`), checked here (a known image format that decodes, within the size limit) and sent
as `data:` URLs in image parts (`inference.chat.content_parts.ImagePart`), so the embedded engine
and any OpenAI-compatible server get the same request. Nothing is fetched from the network.
Whether the model can see them is the backend's `supports_images`; without it the agent says so
instead of sending them.
"""

from __future__ import annotations

import base64
import io
import re
from typing import Callable

from inference.chat.content_parts import ImagePart

MAX_IMAGE_BYTES = 20 << 20  # the engine's default limit (EngineConfig.max_image_bytes)
IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".gif", ".webp", ".bmp")
_MAGIC = ((b"\x89PNG\r\n\x1a\n", "image/png"), (b"\xff\xd8\xff", "image/jpeg"), (b"GIF87a", "image/gif"),
          (b"GIF89a", "image/gif"))
MENTION = re.compile(r"(?:^|(?<=\s))@([^\s]+)")


class ImageFileError(ValueError):
    """A file that cannot go to the model as an image; the message names it."""


def image_type(data: bytes) -> str | None:
    """The MIME type of an image file's bytes (by signature), or None when it is not one."""
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return "image/webp"
    if data[:2] == b"BM" and data[6:10] == b"\0\0\0\0":  # reserved header bytes: a text file starting "BM" has none
        return "image/bmp"
    return next((mime for magic, mime in _MAGIC if data.startswith(magic)), None)


def describe(data: bytes, name: str, max_bytes: int = MAX_IMAGE_BYTES) -> str:
    """'PNG image, 640x480, 12,345 bytes' after checking that the bytes are a whole image."""
    from PIL import Image

    mime = image_type(data)
    if mime is None:
        raise ImageFileError(f"{name}: not a PNG, JPEG, GIF, WebP or BMP image")
    if len(data) > max_bytes:
        raise ImageFileError(f"{name}: {len(data):,} bytes, over the {max_bytes:,}-byte image limit")
    try:
        with Image.open(io.BytesIO(data)) as image:
            image.load()  # a truncated or corrupt file fails here, not in the model's request
            size = image.size
    except Exception as exc:  # Pillow raises many types for bad data
        raise ImageFileError(f"{name}: the image does not decode ({type(exc).__name__}: {exc})") from None
    return f"{mime.split('/')[1].upper()} image, {size[0]}x{size[1]}, {len(data):,} bytes"


def image_part(data: bytes, name: str, at: int = 0, max_bytes: int = MAX_IMAGE_BYTES) -> tuple[ImagePart, str]:
    """An image file's bytes -> (an image part (a data: URL) at character `at` of its message,
    its description)."""
    text = describe(data, name, max_bytes)
    url = f"data:{image_type(data)};base64,{base64.b64encode(data).decode()}"
    return ImagePart(url=url, at=at, where=name), text


def mentioned_images(text: str, read: Callable[[str], bytes]) -> list[ImagePart]:
    """`@path` mentions of image files (by suffix) in a message -> image parts placed right after
    each mention. `read(path)` returns a file's bytes (the sandbox's or the checkout's) and raises
    OSError-like errors for a missing file; either becomes an ImageFileError naming the mention."""
    parts = []
    for match in MENTION.finditer(text):
        name = match.group(1).rstrip(".,;:!?)")
        if not name.lower().endswith(IMAGE_SUFFIXES):
            continue
        try:
            data = read(name)
        except Exception as exc:  # the sandbox and the host raise different types for a missing file
            raise ImageFileError(f"@{name}: cannot read it ({type(exc).__name__}: {exc})") from None
        parts.append(image_part(data, f"@{name}", at=match.start(1) + len(name))[0])
    return parts
