"""Image parts -> the engine's PromptImages, for a GLM-5.3-Flash checkpoint (what its processor does).

`FlashImageInputs` is built once per engine from the checkpoint: the image token id, the processor
settings (preprocessor_config.json, as transformers' Glm5NextImageProcessor saves them) and the
configured limits. Front ends (the server, the agent's embedded backend) call
- `prepare(url, where)` per image part: decode (data: URLs; remote URLs refused), resize to the
  aligned canvas and hash it. Results are kept in a small LRU keyed by a digest of the URL, since
  agents re-send the same screenshots every turn;
- `expand(ids, images)`: the chat template writes one `<|image|>` per image (between
  `<|begin_of_image|>` and `<|end_of_image|>`); like transformers' Glm5NextProcessor, each becomes
  as many image tokens as the image has merged patches. -> the ids and a PromptImage per image.
Every failure is an ImageInputError naming the content part, so a server answers 400 for that
request alone.
"""

from __future__ import annotations

import hashlib
import json
import threading
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path

import torch

from inference.engine.multimodal import PromptImage, content_hash
from inference.glm5_next.image_processor import ImageInputError, ImageLimits, load_image, to_canvas


@dataclass(frozen=True)
class ProcessorSettings:
    patch_size: int = 14
    merge_size: int = 2
    temporal_patch_size: int = 2
    min_image_tokens: int = 16
    max_image_tokens: int = 8000

    @classmethod
    def from_checkpoint(cls, path: Path) -> ProcessorSettings:
        """preprocessor_config.json (transformers' image processor file), or the `image_processor`
        entry of processor_config.json; the release defaults where neither exists."""
        raw: dict = {}
        if (path / "preprocessor_config.json").is_file():
            raw = json.loads((path / "preprocessor_config.json").read_text(encoding="utf-8"))
        elif (path / "processor_config.json").is_file():
            raw = json.loads((path / "processor_config.json").read_text(encoding="utf-8")).get("image_processor") or {}
        values = {}
        for name in cls.__dataclass_fields__:
            if name in raw:
                if not isinstance(raw[name], int) or raw[name] < 1:
                    raise ValueError(f"preprocessor_config.json: {name}={raw[name]!r}, expected a positive integer")
                values[name] = raw[name]
        if raw.get("patch_expand_factor", 1) != 1:
            raise ValueError(f"preprocessor_config.json: patch_expand_factor={raw['patch_expand_factor']!r}; "
                             "only 1 is supported")
        return cls(**values)


@dataclass(frozen=True, eq=False)
class PreparedImage:
    """One decoded image, ready to be placed in a prompt."""

    canvas: torch.Tensor  # uint8 [H, W, 3]
    grid_thw: torch.Tensor  # [3]
    num_tokens: int
    content_hash: str

    def at(self, offset: int) -> PromptImage:
        return PromptImage(offset=offset, num_tokens=self.num_tokens, content_hash=self.content_hash,
                           canvas=self.canvas, grid_thw=self.grid_thw)


class FlashImageInputs:
    def __init__(self, image_token_id: int, settings: ProcessorSettings = ProcessorSettings(),
                 limits: ImageLimits = ImageLimits(), cache_bytes: int = 256 << 20):
        self.image_token_id = image_token_id
        self.settings = settings
        self.limits = ImageLimits(limits.max_bytes, limits.max_pixels, settings.min_image_tokens,
                                  settings.max_image_tokens)
        self.cache_bytes = cache_bytes
        self._cache: OrderedDict[bytes, PreparedImage] = OrderedDict()
        self._cached_bytes = 0
        self._lock = threading.Lock()

    def tokens_for(self, grid_thw: torch.Tensor) -> int:
        return int(grid_thw.prod()) // self.settings.merge_size**2

    def prepare(self, url: str, where: str) -> PreparedImage:
        """A content part's URL -> the image at its canvas size (ImageInputError naming `where`)."""
        key = hashlib.blake2b(url.encode(), digest_size=16).digest()
        with self._lock:
            hit = self._cache.get(key)
            if hit is not None:
                self._cache.move_to_end(key)
                return hit
        s = self.settings
        image = load_image(url, where, self.limits)
        canvas = torch.from_numpy(to_canvas(image, s.patch_size, s.merge_size, s.temporal_patch_size, self.limits))
        grid = torch.tensor([1, canvas.shape[0] // s.patch_size, canvas.shape[1] // s.patch_size])
        prepared = PreparedImage(canvas, grid, self.tokens_for(grid), content_hash(canvas, grid))
        with self._lock:
            if key not in self._cache:
                self._cache[key] = prepared
                self._cached_bytes += canvas.numel()
            while self._cached_bytes > self.cache_bytes and len(self._cache) > 1:
                _, old = self._cache.popitem(last=False)
                self._cached_bytes -= old.canvas.numel()
        return prepared

    def expand(self, ids: list[int], images: list[PreparedImage], base: int = 0,
               where: str = "messages") -> tuple[list[int], list[PromptImage]]:
        """Each `<|image|>` in `ids` -> the next image's tokens. `base`: where `ids` starts in the
        whole prompt (a conversation expands only its newly rendered part)."""
        at = [i for i, t in enumerate(ids) if t == self.image_token_id]
        if len(at) != len(images):
            raise ImageInputError(f"{where}: the rendered prompt has {len(at)} <|image|> placeholders for "
                                  f"{len(images)} images; text may not contain the <|image|> marker itself")
        out: list[int] = []
        placed: list[PromptImage] = []
        prev = 0
        for pos, image in zip(at, images):
            out += ids[prev:pos]
            placed.append(image.at(base + len(out)))
            out += [self.image_token_id] * image.num_tokens
            prev = pos + 1
        out += ids[prev:]
        return out, placed
