"""GLM-5.3-Flash image preprocessing: OpenAI-style image parts -> (pixel_values, grid_thw).

Reproduces transformers' Glm5NextImageProcessorPil (Pillow, no network): RGB; `smart_resize`
picks a canvas aligned to patch_size * merge_size within [min_image_tokens, max_image_tokens]
merged tokens; the image is bicubic-resized to fit it (never upscaled once it meets the minimum)
and zero-padded at the bottom/right (`to_canvas`, uint8); then / 255, CLIP mean/std
normalization, and patchified into rows of C x T x P x P (the still image repeated over the
temporal patch), block-major over merge blocks (`patchify`, torch, on any device). Each image
becomes grid_h * grid_w / merge^2 image tokens.

Sources: `data:image/...;base64,` URLs, and local file paths where the caller allows them (the
agent); remote URLs are refused (this process never fetches). Every failure is an
`ImageInputError` naming the content part, so a server can answer 400 for that request alone.
"""

from __future__ import annotations

import base64
import binascii
import io
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from inference.chat.content_parts import ImagePartError

CLIP_MEAN = (0.48145466, 0.4578275, 0.40821073)
CLIP_STD = (0.26862954, 0.26130258, 0.27577711)


class ImageInputError(ImagePartError):
    """An image part that cannot be used; the message names the part."""


@dataclass(frozen=True)
class ImageLimits:
    max_bytes: int = 20 << 20  # encoded size
    max_pixels: int = 64_000_000  # decoded width x height (decompression-bomb guard)
    min_image_tokens: int = 16
    max_image_tokens: int = 8000


def smart_resize(height: int, width: int, factor: int, temporal: int, min_tokens: int, max_tokens: int) -> tuple[int, int]:
    """The aligned canvas (height, width): transformers' smart_resize for one still image."""
    per_token = temporal * factor**2
    min_pixels, max_pixels = min_tokens * per_token, max_tokens * per_token

    def align(v: int) -> int:
        return math.ceil(v / factor) * factor

    frames = temporal
    h, w = align(height), align(width)
    if frames * h * w < min_pixels:
        scale = math.sqrt(min_pixels / (temporal * height * width))
        h, w = align(max(1, math.ceil(height * scale))), align(max(1, math.ceil(width * scale)))
    if frames * h * w > max_pixels:
        if max_pixels < frames * factor**2:
            raise ImageInputError(f"max_image_tokens={max_tokens}: too small for one aligned patch")
        low, high, h, w = 1, height, factor, factor
        while low <= high:  # the tallest content height whose aligned canvas fits the budget
            mid = (low + high) // 2
            ch, cw = align(mid), align(max(1, math.floor(width * mid / height)))
            if frames * ch * cw <= max_pixels:
                h, w, low = ch, cw, mid + 1
            else:
                high = mid - 1
    return h, w


def load_image(part: dict | str, where: str, limits: ImageLimits = ImageLimits(), allow_paths: bool = False):
    """An OpenAI content part {"type": "image_url", "image_url": {"url": ...}} (or its URL) -> PIL RGB image."""
    from PIL import Image, UnidentifiedImageError

    url = part if isinstance(part, str) else part.get("image_url")
    if isinstance(url, dict):
        url = url.get("url")
    if not isinstance(url, str) or not url:
        raise ImageInputError(f"{where}: image_url.url missing (expected a data: URL)")
    if url.startswith("data:"):
        header, _, payload = url.partition(",")
        if ";base64" not in header or not header[5:].startswith("image/"):
            raise ImageInputError(f"{where}: expected data:image/...;base64,<bytes>, got {header[:40]!r}")
        if len(payload) * 3 // 4 > limits.max_bytes:
            raise ImageInputError(f"{where}: image larger than the {limits.max_bytes}-byte limit")
        try:
            raw = base64.b64decode(payload, validate=True)
        except (binascii.Error, ValueError):
            raise ImageInputError(f"{where}: the base64 payload does not decode") from None
    elif url.startswith(("http://", "https://", "ftp://")):
        raise ImageInputError(f"{where}: remote image URLs are not fetched ({url[:60]!r}); send a data: URL")
    elif allow_paths:
        path = Path(url.removeprefix("file://"))
        if not path.is_file():
            raise ImageInputError(f"{where}: no image file at {path}")
        if path.stat().st_size > limits.max_bytes:
            raise ImageInputError(f"{where}: {path} is larger than the {limits.max_bytes}-byte limit")
        raw = path.read_bytes()
    else:
        raise ImageInputError(f"{where}: unsupported image URL {url[:40]!r} (expected a data: URL)")
    try:
        image = Image.open(io.BytesIO(raw))
        if image.width * image.height > limits.max_pixels:
            raise ImageInputError(f"{where}: {image.width}x{image.height} exceeds the {limits.max_pixels}-pixel limit")
        return to_rgb(image)
    except ImageInputError:
        raise
    except Image.DecompressionBombError:  # Pillow's own guard, for headers far past any sane size
        raise ImageInputError(f"{where}: the image exceeds the {limits.max_pixels}-pixel limit") from None
    except (UnidentifiedImageError, OSError, SyntaxError, ValueError) as exc:  # truncated or corrupt data
        raise ImageInputError(f"{where}: the image bytes do not decode ({exc.__class__.__name__})") from None


def to_rgb(image):
    """RGB as transformers converts it: transparency is composited onto white (a transparent
    screenshot region is white to the model, not whatever colour its hidden pixels hold)."""
    from PIL import Image

    if "A" in image.getbands() or image.info.get("transparency") is not None:
        rgba = image.convert("RGBA")
        return Image.alpha_composite(Image.new("RGBA", rgba.size, (255, 255, 255, 255)), rgba).convert("RGB")
    return image.convert("RGB")


def to_canvas(image, patch_size: int = 14, merge_size: int = 2, temporal_patch_size: int = 2,
              limits: ImageLimits = ImageLimits()) -> np.ndarray:
    """A PIL image -> the aligned canvas the vision tower sees, uint8 [H, W, 3]: bicubic-resized
    (never upscaled once it meets the minimum) and zero-padded at the bottom/right. Kept as uint8:
    8x smaller than the float patch rows that `patchify` makes from it when they are needed."""
    from PIL import Image

    factor = patch_size * merge_size
    image = to_rgb(image)
    width, height = image.size
    th, tw = smart_resize(height, width, factor, temporal_patch_size, limits.min_image_tokens, limits.max_image_tokens)
    scale = min(th / height, tw / width)
    if temporal_patch_size * height * width >= temporal_patch_size * factor**2 * limits.min_image_tokens:
        scale = min(1.0, scale)  # big enough already: only ever shrink
    ch, cw = max(1, min(th, math.floor(height * scale))), max(1, min(tw, math.floor(width * scale)))
    if (ch, cw) != (height, width):
        image = image.resize((cw, ch), Image.Resampling.BICUBIC)
    canvas = np.zeros((th, tw, 3), dtype=np.uint8)
    canvas[:ch, :cw] = np.asarray(image, dtype=np.uint8)
    return canvas


def patchify(canvas: torch.Tensor, patch_size: int = 14, merge_size: int = 2,
             temporal_patch_size: int = 2) -> tuple[torch.Tensor, torch.Tensor]:
    """uint8 canvas [H, W, 3] (any device) -> (pixel rows [h*w, 3*T*P*P] fp32, grid_thw [3]):
    / 255, CLIP normalization, patches block-major over merge blocks, the still image repeated
    over the temporal patch."""
    th, tw, _ = canvas.shape
    mean = torch.tensor(CLIP_MEAN, dtype=torch.float32, device=canvas.device).view(3, 1, 1)
    std = torch.tensor(CLIP_STD, dtype=torch.float32, device=canvas.device).view(3, 1, 1)
    arr = (canvas.permute(2, 0, 1).to(torch.float32) / 255.0 - mean) / std
    gh, gw, m = th // patch_size, tw // patch_size, merge_size
    p = arr.reshape(3, gh // m, m, patch_size, gw // m, m, patch_size).permute(1, 4, 2, 5, 0, 3, 6)
    p = p.unsqueeze(5).expand(*p.shape[:5], temporal_patch_size, *p.shape[5:])  # C, T, P, P last
    rows = p.reshape(gh * gw, 3 * temporal_patch_size * patch_size**2)
    return rows, torch.tensor([1, gh, gw])


def preprocess(images: list, patch_size: int = 14, merge_size: int = 2, temporal_patch_size: int = 2,
               limits: ImageLimits = ImageLimits()) -> tuple[torch.Tensor, torch.Tensor]:
    """PIL images -> (pixel_values [sum patches, 3*T*P*P] fp32, image_grid_thw [n, 3]), as
    transformers' processor returns them."""
    rows, grids = [], []
    for image in images:
        canvas = to_canvas(image, patch_size, merge_size, temporal_patch_size, limits)
        r, g = patchify(torch.from_numpy(canvas), patch_size, merge_size, temporal_patch_size)
        rows.append(r)
        grids.append(g)
    return torch.cat(rows), torch.stack(grids)


def image_token_count(grid_thw: torch.Tensor, merge_size: int = 2) -> list[int]:
    return (grid_thw.prod(-1) // merge_size**2).tolist()
