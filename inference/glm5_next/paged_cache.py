"""The engine-shaped cache for GLM-5.3-Flash: paged DSA rows + KDA state slots + state snapshots.

- DSA layers keep their per-token rows (MLA latent; indexer key and pool-gate logits on full
  indexer layers) in pages addressed by the engine's ForwardBatch block tables, like
  PagedKVCache does for GLM-5.x, so pages can be shared between sequences by a prefix cache.
- KDA layers keep one fixed-size state per running sequence in a slot (conv window + fp32
  recurrent state), chosen by the caller per batch row.
- A prefix hit needs the KDA state at the matched position, not only the pages: `snapshot(slot)`
  copies a slot's state (taken when a sequence stands at a page boundary, e.g. at the end of a
  turn), `restore(slot, snap)` puts it into another slot, which then continues after the shared
  pages. Snapshots are plain tensors (`KdaSnapshot.nbytes`), so a cache can count them against its
  budget and spill them to host memory like pages (`to`).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from inference.glm5_next.config import Glm5NextTextConfig
from inference.glm5_next.kda import KdaState


@dataclass
class KdaSnapshot:
    conv: torch.Tensor  # [n_kda, 3HD, K-1]
    recurrent: torch.Tensor  # [n_kda, H, Dk, Dv]
    length: int  # tokens the state has absorbed

    @property
    def nbytes(self) -> int:
        return self.conv.numel() * self.conv.element_size() + self.recurrent.numel() * self.recurrent.element_size()

    def to(self, device) -> KdaSnapshot:
        return KdaSnapshot(self.conv.to(device), self.recurrent.to(device), self.length)


class FlashPagedCache:
    def __init__(self, config: Glm5NextTextConfig, num_pages: int, page_size: int, slots: int, device, dtype):
        if num_pages < 1 or page_size < 1 or slots < 1:
            raise ValueError(f"num_pages={num_pages}, page_size={page_size}, slots={slots}: expected positive")
        self.config, self.num_pages, self.page_size, self.slots = config, num_pages, page_size, slots
        layers = range(config.num_hidden_layers)
        self.kda_index = {i: j for j, i in enumerate(i for i in layers if config.is_kda(i))}
        self.dsa_index = {i: j for j, i in enumerate(i for i in layers if not config.is_kda(i))}
        self.full_index = {i: j for j, i in enumerate(i for i in self.dsa_index if config.is_full_indexer(i))}
        d, h = config.linear_head_dim, config.linear_num_heads
        self.conv = torch.zeros(len(self.kda_index), slots, 3 * config.linear_dim, config.linear_conv_kernel_dim - 1,
                                device=device)
        self.recurrent = torch.zeros(len(self.kda_index), slots, h, d, d, device=device)
        # zeros, not empty: rows past a sequence's end are read (then masked) and must be finite
        self.latent = torch.zeros(len(self.dsa_index), num_pages, page_size, config.kv_lora_rank, device=device, dtype=dtype)
        self.index_keys = torch.zeros(len(self.full_index), num_pages, page_size, config.index_head_dim,
                                      device=device, dtype=dtype)
        self.index_gates = torch.zeros_like(self.index_keys)
        self.slot_lengths = [0] * slots

    @property
    def kv_bytes_per_token(self) -> int:
        per = self.latent[:, 0, 0].numel() * self.latent.element_size()
        return per + 2 * self.index_keys[:, 0, 0].numel() * self.index_keys.element_size()

    @property
    def state_bytes_per_sequence(self) -> int:
        return self.conv[:, 0].numel() * self.conv.element_size() + self.recurrent[:, 0].numel() * self.recurrent.element_size()

    # ---- slots and snapshots ---------------------------------------------------------------
    def reset_slot(self, slot: int) -> None:
        """A fresh sequence (or one preempted and recomputed from scratch) starts from zeros."""
        self.conv[:, slot].zero_()
        self.recurrent[:, slot].zero_()
        self.slot_lengths[slot] = 0

    def snapshot(self, slot: int) -> KdaSnapshot:
        return KdaSnapshot(self.conv[:, slot].clone(), self.recurrent[:, slot].clone(), self.slot_lengths[slot])

    def restore(self, slot: int, snap: KdaSnapshot) -> None:
        self.conv[:, slot] = snap.conv.to(self.conv.device)
        self.recurrent[:, slot] = snap.recurrent.to(self.recurrent.device)
        self.slot_lengths[slot] = snap.length

    # ---- views used by the forward ----------------------------------------------------------
    def kda_view(self, layer: int, slots: torch.Tensor) -> KdaState:
        j = self.kda_index[layer]
        return KdaState(self.conv[j, slots], self.recurrent[j, slots])

    def kda_write(self, layer: int, slots: torch.Tensor, state: KdaState) -> None:
        j = self.kda_index[layer]
        self.conv[j, slots] = state.conv
        self.recurrent[j, slots] = state.recurrent

    def dsa_view(self, layer: int, block_table: torch.Tensor, starts: torch.Tensor, lengths: torch.Tensor) -> _DsaPages:
        return _DsaPages(self, layer, block_table, starts, lengths)


class _DsaPages:
    """DsaAttention's `state` over pages: writes each row's valid new tokens at positions
    starts[b] + t through its block table, returns rows 0..max end gathered back per sequence."""

    def __init__(self, cache: FlashPagedCache, layer: int, block_table, starts, lengths):
        self.cache, self.layer = cache, layer
        self.table, self.starts, self.lengths = block_table, starts, lengths
        self.end = int((starts + lengths).max())

    def _write(self, buf: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:
        b, t = rows.shape[:2]
        ps = self.cache.page_size
        pos = self.starts.view(b, 1) + torch.arange(t, device=rows.device).view(1, t)
        valid = torch.arange(t, device=rows.device).view(1, t) < self.lengths.view(b, 1)
        page = self.table.gather(1, (pos // ps).clamp(max=self.table.shape[1] - 1))
        buf[page[valid], (pos % ps)[valid]] = rows[valid].to(buf.dtype)
        every = torch.arange(self.end, device=rows.device)
        pages = self.table[:, (every // ps).clamp(max=self.table.shape[1] - 1)].clamp(min=0)  # -1: unused
        return buf[pages, (every % ps).view(1, -1)]

    def append(self, latent, keys, gates, lengths=None):
        c = self.cache
        latent = self._write(c.latent[c.dsa_index[self.layer]], latent)
        if keys is None:
            return latent, None, None
        j = c.full_index[self.layer]
        return latent, self._write(c.index_keys[j], keys), self._write(c.index_gates[j], gates)
