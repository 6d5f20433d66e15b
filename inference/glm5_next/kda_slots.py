"""Numbered slots of GLM-5.3-Flash's fixed-size KDA state: one state per slot, over every KDA layer.

A state is, per KDA layer, the conv window [3HD, K-1] and the fp32 recurrent state [H, Dk, Dv]
(`bytes_per_slot`, the same whatever the context). The same class holds running sequences' states
(FlashStatePool, FlashPagedCache) and the prefix cache's snapshots of them (device and host pools):
`copy_slot` moves one state between any two of them, all layers in one copy per tensor.
"""

from __future__ import annotations

import torch

from inference.glm5_next.config import Glm5NextTextConfig
from inference.glm5_next.kda import KdaState


def layer_indices(config: Glm5NextTextConfig) -> tuple[dict[int, int], dict[int, int], dict[int, int]]:
    """Model layer -> row in the per-kind buffers: (KDA layers, DSA layers, full-indexer DSA layers)."""
    layers = range(config.num_hidden_layers)
    kda = {layer: j for j, layer in enumerate(i for i in layers if config.is_kda(i))}
    dsa = {layer: j for j, layer in enumerate(i for i in layers if not config.is_kda(i))}
    full = {layer: j for j, layer in enumerate(i for i in dsa if config.is_full_indexer(i))}
    return kda, dsa, full


class KdaSlots:
    def __init__(self, config: Glm5NextTextConfig, slots: int, device):
        if slots < 0:
            raise ValueError(f"slots={slots}: expected >= 0")
        self.index = layer_indices(config)[0]
        d, h = config.linear_head_dim, config.linear_num_heads
        self.conv = torch.zeros(len(self.index), slots, 3 * config.linear_dim, config.linear_conv_kernel_dim - 1,
                                device=device)
        self.recurrent = torch.zeros(len(self.index), slots, h, d, d, device=device)

    @property
    def slots(self) -> int:
        return self.conv.shape[1]

    @property
    def bytes_per_slot(self) -> int:
        per = [t.shape[0] * t.shape[2:].numel() * t.element_size() for t in (self.conv, self.recurrent)]
        return sum(per)

    def pin_memory(self) -> None:
        """Page-locked host slots: copies to and from the device run as DMA."""
        self.conv, self.recurrent = self.conv.pin_memory(), self.recurrent.pin_memory()

    def reset(self, slot: int) -> None:
        self.conv[:, slot].zero_()
        self.recurrent[:, slot].zero_()

    def copy_slot(self, src: int, dst: KdaSlots, dst_slot: int) -> None:
        dst.conv[:, dst_slot].copy_(self.conv[:, src])
        dst.recurrent[:, dst_slot].copy_(self.recurrent[:, src])

    # ---- views used by the forward ----------------------------------------------------------
    def view(self, layer: int, slots: torch.Tensor) -> KdaState:
        j = self.index[layer]
        return KdaState(self.conv[j, slots], self.recurrent[j, slots])

    def write(self, layer: int, slots: torch.Tensor, state: KdaState) -> None:
        j = self.index[layer]
        self.conv[j, slots] = state.conv
        self.recurrent[j, slots] = state.recurrent
