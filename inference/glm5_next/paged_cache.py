"""The engine-shaped cache for GLM-5.3-Flash: paged DSA rows + KDA state slots + state snapshots.

- DSA layers keep their per-token rows (MLA latent; indexer key and pool-gate logits on full
  indexer layers) in pages addressed by the engine's ForwardBatch block tables, like
  PagedKVCache does for GLM-5.x, so pages can be shared between sequences by a prefix cache (and
  copied to and from a host tier: `latent` and `indexer` are page-major per layer, as
  host_tier.copy_pages expects).
- KDA layers keep one fixed-size state per running sequence in a slot (`kda`: conv window + fp32
  recurrent state), chosen by the caller per batch row; `slot_lengths` says how many tokens each
  slot's state has absorbed.
- A prefix hit needs the KDA state at the matched position, not only the pages: `save(slot, s)`
  copies a running state into snapshot slot s (`snapshots`), `load(s, slot, length)` puts one
  back into a running slot, which then continues after the shared pages; `spill` copies a
  snapshot into a host-side cache's snapshot slots, and `load(..., source=host)` reads it from
  there. The engine's radix attachment (inference/engine/state_snapshots.py) decides when.
"""

from __future__ import annotations

from typing import Optional

import torch

from inference.glm5_next.config import Glm5NextTextConfig
from inference.glm5_next.dsa_rows import DsaRows, DsaRowStore
from inference.glm5_next.kda_slots import KdaSlots, layer_indices


class FlashPagedCache(DsaRowStore):
    def __init__(self, config: Glm5NextTextConfig, num_pages: int, page_size: int, slots: int, device, dtype,
                 snapshots: int = 0):
        """slots: running sequences' KDA states; snapshots: saved ones (0 on a cache without a
        prefix cache; a host-side cache has only pages and snapshots)."""
        if num_pages < 0 or page_size < 1 or slots < 0 or snapshots < 0:
            raise ValueError(f"num_pages={num_pages}, page_size={page_size}, slots={slots}, snapshots={snapshots}: "
                             "expected page_size >= 1 and the others >= 0")
        self.config, self.num_pages, self.page_size, self.slots = config, num_pages, page_size, slots
        _, self.dsa_index, self.full_index = layer_indices(config)
        self.kda = KdaSlots(config, slots, device)
        self.snapshots = KdaSlots(config, snapshots, device)
        # zeros, not empty: rows past a sequence's end are read (then masked) and must be finite
        self.latent = torch.zeros(len(self.dsa_index), num_pages, page_size, config.kv_lora_rank, device=device, dtype=dtype)
        self.index_keys = torch.zeros(len(self.full_index), num_pages, page_size, config.index_head_dim,
                                      device=device, dtype=dtype)
        self.index_gates = torch.zeros_like(self.index_keys)
        self.slot_lengths = [0] * slots

    @property
    def device(self) -> torch.device:
        return self.latent.device

    @property
    def indexer(self) -> dict[str, torch.Tensor]:
        """Per full-indexer layer, its key and gate pages [num_pages, page_size, Dh] (host tier copies)."""
        rows = {f"keys{j}": t for j, t in enumerate(self.index_keys)}
        return rows | {f"gates{j}": t for j, t in enumerate(self.index_gates)}

    def pin_memory(self) -> None:
        """Page-locked host memory (a host-side cache on a CUDA engine): copies run as DMA."""
        self.latent, self.index_keys, self.index_gates = (t.pin_memory() for t in
                                                          (self.latent, self.index_keys, self.index_gates))
        self.snapshots.pin_memory()

    @property
    def state_bytes_per_sequence(self) -> int:
        return self.kda.bytes_per_slot

    # ---- slots and snapshots ---------------------------------------------------------------
    def reset_slot(self, slot: int) -> None:
        """A fresh sequence (or one recomputed from scratch) starts from zeros."""
        self.kda.reset(slot)
        self.slot_lengths[slot] = 0

    def save(self, slot: int, snapshot: int) -> None:
        self.kda.copy_slot(slot, self.snapshots, snapshot)

    def load(self, snapshot: int, slot: int, length: int, source: Optional[FlashPagedCache] = None) -> None:
        """Snapshot `snapshot` of this cache (or of `source`, a host-side cache) -> running slot,
        whose state then stands after `length` tokens."""
        (source or self).snapshots.copy_slot(snapshot, self.kda, slot)
        self.slot_lengths[slot] = length

    def spill(self, snapshot: int, host: FlashPagedCache, host_snapshot: int) -> None:
        self.snapshots.copy_slot(snapshot, host.snapshots, host_snapshot)

    def copy_pages(self, src: torch.Tensor, dst: torch.Tensor) -> None:
        """Device page copies (a partly matched page for a request that continues in it)."""
        for buf in (self.latent, self.index_keys, self.index_gates):
            buf[:, dst] = buf[:, src]

    # ---- views used by the forward (KDA states: self.kda.view / write) ---------------------
    def dsa_view(self, layer: int, block_table: torch.Tensor, starts: torch.Tensor, lengths: torch.Tensor) -> _DsaPages:
        return _DsaPages(self, layer, block_table, starts, lengths)


class _DsaPages(DsaRows):
    """DsaRows in pages: row t of sequence b lives in page block_table[b, t // page_size] at
    t % page_size (-1 entries, unused pages, are read as page 0 and masked)."""

    def __init__(self, cache: FlashPagedCache, layer: int, block_table, starts, lengths):
        super().__init__(cache, layer, starts, lengths)
        self.table = block_table

    def _write(self, buf: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:
        ps, last = self.store.page_size, self.table.shape[1] - 1
        pos, valid = self._positions(rows)
        page = self.table.gather(1, (pos // ps).clamp(max=last))
        buf[page[valid], (pos % ps)[valid]] = rows[valid].to(buf.dtype)
        every = torch.arange(self.end, device=rows.device)
        pages = self.table[:, (every // ps).clamp(max=last)].clamp(min=0)
        return buf[pages, (every % ps).view(1, -1)]
