"""The fixed device buffers a uniform step reads, and the one host->device copy that fills them.

A uniform step (inference/static_step.py) of shape (B, T, W) reads, as int64, in this order:

    input_ids [B*T] | positions [B*T] | seq_lens [B] | block_table [B*W] | hidden_rows [B*T] | reuse_rows [B]

(hidden_rows / reuse_rows: MTP passes, the rows of the earlier hidden states and selection each
token takes), each part starting at a multiple of ALIGN. The layout is packed from offset 0 for
every shape, so a step is staged in a host
buffer with numpy and moved by ONE copy of its used prefix; the views a graph was captured with
(`views(shape)`) stay valid forever because the device buffer never moves.

NOTE: two pinned host buffers alternate. A non_blocking copy reads its source when the device
reaches it, so a buffer is refilled only after the copy that last read it has run (its event);
with two, the host can stage step N+1 while step N's copy is still queued.

Padding rows (graph buckets larger than the batch) are ordinary sequences of T tokens at
positions 0..T-1 whose whole block table is `pad_page`: they write only into that page.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import numpy as np
import torch

from inference.static_step import StepInputs


class StepShape(NamedTuple):
    batch: int  # B: sequences, padding included
    tokens: int  # T: new tokens per sequence
    width: int  # W: block-table columns (the step sees S = W * page_size key positions)


@dataclass
class StagedStep:
    """What one `stage` call wrote: the shape it used and how many rows are real."""

    shape: StepShape
    num_seqs: int  # real sequences (the first rows); the rest are padding

    @property
    def num_tokens(self) -> int:
        return self.num_seqs * self.shape.tokens


# Every part starts at a multiple of this many elements (128 bytes). NOTE: it also keeps a part's
# offset from being 1, which torch.compile would specialize on (one graph more for a batch of one).
ALIGN = 16


def _sizes(shape: StepShape) -> list[int]:
    b, t, w = shape
    return [b * t, b * t, b, b * w, b * t, b]


def _offsets(shape: StepShape) -> list[int]:
    """Start of each part, then the end of the last."""
    out = [0]
    for size in _sizes(shape):
        out.append(out[-1] + -(-size // ALIGN) * ALIGN)
    return out


class DecodeBuffers:
    def __init__(self, max_batch: int, max_tokens: int, max_width: int, device: torch.device):
        self.device = torch.device(device)
        self.capacity = _offsets(StepShape(max_batch, max_tokens, max_width))[-1]
        self.max = StepShape(max_batch, max_tokens, max_width)
        pin = self.device.type == "cuda"
        self._host = [torch.zeros(self.capacity, dtype=torch.long, pin_memory=pin) for _ in range(2)]
        self._host_np = [h.numpy() for h in self._host]
        self._copied = [torch.cuda.Event() if pin else None for _ in range(2)]
        self._turn = 0
        self.device_buffer = torch.zeros(self.capacity, dtype=torch.long, device=self.device)

    def fits(self, shape: StepShape) -> bool:
        return all(s <= m for s, m in zip(shape, self.max))

    def _parts(self, flat, shape: StepShape) -> list:
        return [flat[start : start + size] for start, size in zip(_offsets(shape), _sizes(shape))]

    def views(self, shape: StepShape) -> StepInputs:
        """The device views a step of this shape reads (the same tensors for every step of it)."""
        ids, pos, lens, table, _, _ = self._parts(self.device_buffer, shape)
        return StepInputs(ids, pos, lens, table.view(shape.batch, shape.width), shape.tokens)

    def hidden_rows(self, shape: StepShape) -> torch.Tensor:
        return self._parts(self.device_buffer, shape)[4]

    def reuse_rows(self, shape: StepShape) -> torch.Tensor:
        return self._parts(self.device_buffer, shape)[5]

    def stage(self, shape: StepShape, tokens: list[list[int]], starts: list[int], pages: list[list[int]],
              pad_page: int, hidden_rows: list[int] | None = None, reuse_rows: list[int] | None = None) -> StagedStep:
        """Write a step (every entry of `tokens` T long) into a host buffer and queue its copy.
        hidden_rows: per sequence, the first row of its hidden states; reuse_rows: per sequence."""
        b, t, w = shape
        n = len(tokens)
        turn = self._turn
        self._turn ^= 1
        if self._copied[turn] is not None:
            self._copied[turn].synchronize()  # the copy that last read this buffer has run
        ids, pos, lens, table, hrows, rrows = self._parts(self._host_np[turn], shape)
        ids[: n * t] = np.fromiter((tok for seq in tokens for tok in seq), dtype=np.int64, count=n * t)
        ids[n * t :] = 0
        first = np.asarray(starts, dtype=np.int64)
        offsets = np.arange(t, dtype=np.int64)
        pos[: n * t] = (first[:, None] + offsets).ravel()
        pos[n * t :] = np.tile(offsets, b - n)
        lens[:n] = first + t
        lens[n:] = t
        grid = table.reshape(b, w)
        grid[:n] = -1
        for row, seq_pages in zip(grid, pages):
            used = min(len(seq_pages), w)
            row[:used] = seq_pages[:used]
        grid[n:] = pad_page
        if hidden_rows is not None:
            hrows[: n * t] = (np.asarray(hidden_rows, dtype=np.int64)[:, None] + offsets).ravel()
            hrows[n * t :] = 0
        if reuse_rows is not None:
            rrows[:n] = reuse_rows
            rrows[n:] = 0
        used = _offsets(shape)[-1]
        self.device_buffer[:used].copy_(self._host[turn][:used], non_blocking=True)
        if self._copied[turn] is not None:
            self._copied[turn].record()
        return StagedStep(shape, n)
