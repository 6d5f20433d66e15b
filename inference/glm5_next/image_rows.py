"""Image embeddings for the tokens of one engine step (the GLM-5.3-Flash runner).

NOTE invariants:
- A request's images are embedded once: the vision tower runs on all of them together at the first
  step that feeds one of their positions, and the rows stay on the sequence (`seq.image_embeds`)
  until the chunk holding the last image position has run. Only a sequence preempted before that
  point, whose cached prefix then ends inside its images, embeds again.
- Rows are taken per step by position, so a prefill chunk (or a prefix hit) may cut an image
  anywhere: each chunk gets exactly the rows of the image positions it feeds.
"""

from __future__ import annotations

import torch

from inference.glm5_next.image_processor import patchify


class ImageRows:
    def __init__(self, model, patch_size: int, merge_size: int, temporal_patch_size: int):
        self.model = model
        self.patch = (patch_size, merge_size, temporal_patch_size)
        self.vision_passes = 0  # vision tower runs (one per request, unless preempted mid-images)

    def _embed(self, seq) -> torch.Tensor:
        device = self.model.device
        rows, grids = zip(*(patchify(image.canvas.to(device), *self.patch) for image in seq.images))
        self.vision_passes += 1
        return self.model.embed_images(torch.cat(rows), torch.stack(grids))

    def for_step(self, items, token_offsets: list[int]) -> tuple[torch.Tensor, torch.Tensor] | None:
        """(flat indices into the step's tokens, their embeddings), or None when no image token is fed.
        items: ScheduledItems; token_offsets: where each item's tokens start in the flat batch."""
        flat, values = [], []
        for it, offset in zip(items, token_offsets):
            seq = it.seq
            lo, hi = it.start, it.start + len(it.token_ids)
            if not seq.images or hi <= seq.images[0].offset or lo >= seq.images[-1].end:
                continue
            if seq.image_embeds is None:
                seq.image_embeds = self._embed(seq)
            first_row = 0
            for image in seq.images:
                a, b = max(lo, image.offset), min(hi, image.end)
                if a < b:
                    flat.append(torch.arange(offset + a - lo, offset + b - lo))
                    values.append(seq.image_embeds[first_row + a - image.offset:first_row + b - image.offset])
                first_row += image.num_tokens
            if hi >= seq.images[-1].end:
                seq.image_embeds = None  # every image position is computed now
        if not flat:
            return None
        return torch.cat(flat).to(self.model.device), torch.cat(values)
