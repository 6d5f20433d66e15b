"""Per-sequence state slots for serving many GLM-5.3-Flash sequences at once.

A slot holds everything one running sequence carries between steps:
- per KDA layer, fixed bytes whatever the context: the conv window [3HD, K-1] and the fp32
  recurrent state [H, Dk, Dv] (`state_bytes_per_sequence`);
- per DSA layer, rows that grow with the context: the MLA latent [kv_lora_rank] and, on full
  indexer layers, the indexer key and pool-gate logits [2 x Dh] (`kv_bytes_per_token`).
The DSA rows live in a dense [slots, max_len] buffer per layer here (the engine uses pages:
paged_cache.py); the KDA states in `KdaSlots`.
`alloc` hands out a zeroed slot, `free` returns it; `Glm5NextForCausalLM.forward_slots` runs a
ragged batch over slots (each sequence its own number of new tokens).
"""

from __future__ import annotations

import torch

from inference.glm5_next.config import Glm5NextTextConfig
from inference.glm5_next.dsa_rows import DsaRows, DsaRowStore
from inference.glm5_next.kda_slots import KdaSlots, layer_indices


class FlashStatePool(DsaRowStore):
    def __init__(self, config: Glm5NextTextConfig, slots: int, max_len: int, device, dtype: torch.dtype):
        if slots < 1 or max_len < 1:
            raise ValueError(f"slots={slots}, max_len={max_len}: expected positive")
        self.config, self.slots, self.max_len = config, slots, max_len
        _, self.dsa_index, self.full_index = layer_indices(config)
        self.kda = KdaSlots(config, slots, device)
        self.latent = torch.zeros(len(self.dsa_index), slots, max_len, config.kv_lora_rank, device=device, dtype=dtype)
        self.index_keys = torch.zeros(len(self.full_index), slots, max_len, config.index_head_dim, device=device,
                                      dtype=dtype)
        self.index_gates = torch.zeros_like(self.index_keys)
        self.lengths = torch.zeros(slots, dtype=torch.long, device=device)
        self._free = list(range(slots - 1, -1, -1))

    # ---- slots ---------------------------------------------------------------------------
    @property
    def free_slots(self) -> int:
        return len(self._free)

    def alloc(self) -> int:
        if not self._free:
            raise RuntimeError(f"state pool exhausted: all {self.slots} slots are in use")
        slot = self._free.pop()
        self.kda.reset(slot)
        self.lengths[slot] = 0
        return slot

    def free(self, slot: int) -> None:
        if not 0 <= slot < self.slots or slot in self._free:
            raise ValueError(f"slot={slot}: not an allocated slot")
        self._free.append(slot)

    # ---- sizes ---------------------------------------------------------------------------
    @property
    def state_bytes_per_sequence(self) -> int:
        return self.kda.bytes_per_slot

    # ---- views used by the forward (KDA states: self.kda.view / write) ---------------------
    def dsa_view(self, layer: int, slots: torch.Tensor, starts: torch.Tensor, lengths: torch.Tensor) -> _DsaSlots:
        return _DsaSlots(self, layer, slots, starts, lengths)


class _DsaSlots(DsaRows):
    """DsaRows in pool slots: row t of the sequence in slot s lives at [s, t]."""

    def __init__(self, pool: FlashStatePool, layer: int, slots, starts, lengths):
        super().__init__(pool, layer, starts, lengths)
        self.slots = slots

    def _write(self, buf: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:
        pos, valid = self._positions(rows)
        slot = self.slots.view(-1, 1).expand_as(pos)
        buf[slot[valid], pos[valid]] = rows[valid].to(buf.dtype)
        return buf[self.slots, : self.end]
