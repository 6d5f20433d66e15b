"""Sorting items by group id into fixed-size blocks, so one kernel program handles one group.

Used twice: fused MoE groups (token, expert) pairs by expert (item p = t * top_k + j has group
topk_ids[t, j]); the indexer groups query tokens by sequence so a program shares one sequence's
keys between several tokens. Group ids outside [0, num_groups) (e.g. -1 for experts that another
rank owns) are dropped.

``group_into_blocks`` lays the items out so that every block of ``block_size`` consecutive entries
belongs to one group (each group's run is padded up to a multiple of block_size with the sentinel
``num_items``). The layout's size depends only on (num_items, num_groups, block_size), never on
the ids, so the GPU path needs no host synchronization; unused trailing blocks carry group -1 and
the kernels skip them.

The fused MoE kernels (fused_moe.py, fused_moe_fp8.py) share their launch set-up here
(``routed_pairs``) and the first lines of every program (``block_items``).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from kernels.backend import tl, triton_helper


@dataclass(frozen=True)
class GroupedBlocks:
    sorted_items: torch.Tensor  # [num_blocks * block_size] int32 item ids; num_items = padding
    block_group: torch.Tensor  # [num_blocks] int32 group of each block; -1 = unused block
    num_items: int
    block_size: int


@dataclass(frozen=True)
class SortedGroups:
    """Valid items sorted by group (stable), for the torch reference's grouped GEMM."""

    sorted_items: torch.Tensor  # [num_valid] int64 item ids
    group_ends: torch.Tensor  # [num_groups] int32 exclusive end offset of each group's run
    counts: torch.Tensor  # [num_groups] int64 items per group


def _valid_sort(group_ids: torch.Tensor, num_groups: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    flat = group_ids.reshape(-1).long()
    valid = (flat >= 0) & (flat < num_groups)
    key = torch.where(valid, flat, num_groups)  # dropped items sort last
    order = torch.argsort(key, stable=True)
    # A fixed-size scatter, not bincount(flat[valid]): the boolean mask and bincount's
    # data-dependent length would make the host wait for the device (and break CUDA graphs).
    counts = torch.zeros(num_groups + 1, dtype=torch.long, device=flat.device)
    counts = counts.scatter_add_(0, key, torch.ones_like(key))[:num_groups]
    return order, key[order], counts


def sort_by_group(group_ids: torch.Tensor, num_groups: int) -> SortedGroups:
    order, _, counts = _valid_sort(group_ids, num_groups)
    ends = torch.cumsum(counts, 0)
    num_valid = int(ends[-1]) if num_groups else 0
    return SortedGroups(sorted_items=order[:num_valid], group_ends=ends.to(torch.int32), counts=counts)


def group_into_blocks(group_ids: torch.Tensor, num_groups: int, block_size: int) -> GroupedBlocks:
    num_items = group_ids.numel()
    device = group_ids.device
    # Upper bound: every group that gets an item wastes at most block_size - 1 padding entries.
    capacity = num_items + min(num_groups, num_items) * (block_size - 1)
    num_blocks = max(1, -(-capacity // block_size))
    order, sorted_group, counts = _valid_sort(group_ids, num_groups)

    padded = (counts + block_size - 1) // block_size * block_size
    padded_end = torch.cumsum(padded, 0)
    padded_start = padded_end - padded
    start = torch.cumsum(counts, 0) - counts

    valid = sorted_group < num_groups
    g = sorted_group.clamp(max=num_groups - 1)
    rank_in_group = torch.arange(num_items, device=device) - start[g]
    dest = padded_start[g] + rank_in_group

    # Dropped items land in one extra entry, cut off below (no boolean mask: no host sync).
    size = num_blocks * block_size
    sorted_items = torch.full((size + 1,), num_items, dtype=torch.int32, device=device)
    sorted_items.scatter_(0, torch.where(valid, dest, size), order.to(torch.int32))
    sorted_items = sorted_items[:size]

    block_starts = torch.arange(num_blocks, device=device) * block_size
    block_group = torch.searchsorted(padded_end, block_starts, right=True)
    block_group = torch.where(block_group < num_groups, block_group, -1).to(torch.int32)
    return GroupedBlocks(sorted_items=sorted_items, block_group=block_group, num_items=num_items, block_size=block_size)


@triton_helper
def block_items(block, block_group_ptr, sorted_items_ptr, num_items, BLOCK: tl.constexpr):
    """Inside a kernel: (group of `block`, -1 for an unused block; its BLOCK item ids; which of
    them are real items rather than padding). The caller returns early on group < 0."""
    group = tl.load(block_group_ptr + block).to(tl.int64)
    items = tl.load(sorted_items_ptr + block * BLOCK + tl.arange(0, BLOCK))
    return group, items, items < num_items


@dataclass(frozen=True)
class RoutedPairs:
    """The launch set-up both fused-MoE kernels share: the (token, expert) pairs grouped by expert
    into blocks, their routing weights and the fp32 per-pair output the down kernel writes."""

    blocks: GroupedBlocks
    weights: torch.Tensor  # [num_pairs] routing weight of pair t * top_k + j
    out: torch.Tensor  # [num_pairs, hidden] fp32; pairs of experts no local block owns stay zero
    top_k: int

    @property
    def num_pairs(self) -> int:
        return self.blocks.num_items

    @property
    def num_blocks(self) -> int:
        return self.blocks.block_group.shape[0]

    def combine(self, dtype: torch.dtype) -> torch.Tensor:
        """[T, hidden]: each token's top_k partial outputs summed (a reshape-sum: no atomics, so
        the result is deterministic)."""
        return self.out.view(-1, self.top_k, self.out.shape[1]).sum(dim=1).to(dtype)


def routed_pairs(
    topk_ids: torch.Tensor, topk_weights: torch.Tensor, num_experts: int, hidden: int, block_m: int
) -> RoutedPairs:
    """Group the pairs of [T, top_k] routing ids into expert blocks of block_m (no host sync)."""
    num_pairs = topk_ids.numel()
    return RoutedPairs(
        blocks=group_into_blocks(topk_ids, num_experts, block_m),
        weights=topk_weights.reshape(-1).contiguous(),
        out=torch.zeros((num_pairs, hidden), dtype=torch.float32, device=topk_ids.device),
        top_k=topk_ids.shape[1],
    )
