"""Images inside a prompt: what a request carries for each one, and how images key the prefix cache.

A front end (server, agent) decodes and preprocesses each image, expands its placeholder to the
image's token count and sends one `PromptImage` per image: where its tokens start in the prompt,
how many there are, the processor's output (resized canvas + grid) and a hash of it. The
engine's runner embeds a request's images once, at the first prefill chunk that needs them, and
scatters the rows into the image positions chunk by chunk (glm5_next/image_rows.py).

Prefix cache: every image's placeholder ids are the same token, so keying the cache on the prompt
ids would let a different screenshot at the same positions hit. `cache_key_tokens` replaces each
image's span by a value derived from its content hash (SGLang puts hash-derived pad values in its
radix key the same way). The values are negative, so no vocabulary id equals one: the same image
re-sent at the same positions gives the same key (a hit), a different image misses from its first
token on. The scheduler hands these keys to the radix cache; the tree itself never knows.
"""

from __future__ import annotations

import hashlib

import torch
from pydantic import ConfigDict
from pydantic.dataclasses import dataclass


@dataclass(frozen=True, config=ConfigDict(arbitrary_types_allowed=True))
class PromptImage:
    """One image of a prompt: tokens [offset, offset + num_tokens) are its placeholders."""

    offset: int
    num_tokens: int
    content_hash: str  # hex digest of canvas + grid_thw (content_hash below)
    # The processor's resized, zero-padded RGB image, uint8 [H, W, 3]; the runner normalizes and
    # patchifies it on its device (8x smaller than float patch rows while it waits in a session).
    canvas: torch.Tensor
    grid_thw: torch.Tensor  # [3]: (t, h, w) in patches

    def __post_init__(self) -> None:
        if self.offset < 0 or self.num_tokens < 1:
            raise ValueError(f"offset={self.offset}, num_tokens={self.num_tokens}: expected offset >= 0 and "
                             "at least one image token")
        if tuple(self.grid_thw.shape) != (3,):
            raise ValueError(f"grid_thw: shape {tuple(self.grid_thw.shape)}, expected [3] (t, h, w)")
        if self.canvas.dtype != torch.uint8 or self.canvas.dim() != 3 or self.canvas.shape[2] != 3:
            raise ValueError(f"canvas: {self.canvas.dtype} {tuple(self.canvas.shape)}, expected uint8 [H, W, 3]")
        if len(self.content_hash) < 16:
            raise ValueError(f"content_hash={self.content_hash!r}: expected a hex digest of 16+ characters")

    @property
    def end(self) -> int:
        return self.offset + self.num_tokens

    @property
    def key_value(self) -> int:
        """The cache-key value standing for each of this image's tokens (negative: never a token id)."""
        return -1 - int(self.content_hash[:15], 16)


def content_hash(canvas: torch.Tensor, grid_thw: torch.Tensor) -> str:
    """What the model sees of an image, hashed: equal canvas and grid <=> equal embeddings."""
    h = hashlib.blake2b(digest_size=16)
    h.update(str(grid_thw.tolist()).encode())
    h.update(canvas.detach().to("cpu").contiguous().numpy().tobytes())
    return h.hexdigest()


def cache_key_tokens(prompt_ids: list[int], images: list[PromptImage]) -> list[int]:
    """The prompt as the prefix cache keys it: image spans replaced by their hash-derived values."""
    if not images:
        return prompt_ids
    key = list(prompt_ids)
    for image in images:
        key[image.offset:image.end] = [image.key_value] * image.num_tokens
    return key


def check_request_images(req, vision) -> None:
    """EngineError naming the image unless `req`'s images fit its prompt; `vision` is the engine's
    image inputs (None: the checkpoint reads text only)."""
    from inference.engine.request import EngineError

    if vision is None:
        raise EngineError("images", "this checkpoint has no vision tower; it reads text only")
    try:
        check_images(req.prompt_ids, req.images, vision.image_token_id, vision.tokens_for)
    except ValueError as exc:
        field, _, why = str(exc).partition(": ")
        raise EngineError(field, why) from None


def check_images(prompt_ids: list[int], images: list[PromptImage], image_token_id: int,
                 tokens_per_image) -> None:
    """Raise ValueError("images[k]: ...") unless every image sits on its own run of placeholders.
    `tokens_per_image(grid_thw) -> int` is the vision tower's count (patches / merge^2)."""
    previous_end = 0
    for k, image in enumerate(images):
        where = f"images[{k}]"
        if image.offset < previous_end:
            raise ValueError(f"{where}: offset {image.offset} overlaps the previous image (ends at {previous_end}); "
                             "images must be in prompt order")
        if image.end > len(prompt_ids):
            raise ValueError(f"{where}: tokens [{image.offset}, {image.end}) run past the prompt's {len(prompt_ids)}")
        want = tokens_per_image(image.grid_thw)
        if want != image.num_tokens:
            raise ValueError(f"{where}: grid_thw {image.grid_thw.tolist()} makes {want} image tokens, "
                             f"but num_tokens={image.num_tokens}")
        span = prompt_ids[image.offset:image.end]
        if span.count(image_token_id) != len(span):
            raise ValueError(f"{where}: prompt_ids[{image.offset}:{image.end}] are not all the image token "
                             f"{image_token_id}")
        previous_end = image.end
    expected = prompt_ids.count(image_token_id)
    if expected != sum(image.num_tokens for image in images):
        raise ValueError(f"images: the prompt has {expected} image tokens but the images cover "
                         f"{sum(image.num_tokens for image in images)}")
