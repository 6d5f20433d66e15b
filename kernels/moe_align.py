"""Sorting (token, expert) pairs by expert for grouped expert GEMMs.

Pair p = t * top_k + j is token t's j-th routed expert topk_ids[t, j]. Expert ids outside
[0, num_experts) (e.g. -1 for experts owned by another rank) are dropped.

``align_pairs_by_expert`` lays the pairs out so that every block of ``block_m`` consecutive
entries belongs to one expert (each expert's run is padded up to a multiple of block_m with the
sentinel ``num_pairs``). The layout has a size that depends only on (num_pairs, num_experts,
block_m), never on the routing, so the GPU path needs no host synchronization; unused trailing
blocks carry expert -1 and the kernels skip them.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class ExpertBlocks:
    sorted_pairs: torch.Tensor  # [num_blocks * block_m] int32 pair ids, num_pairs = padding
    block_expert: torch.Tensor  # [num_blocks] int32 expert of each block, -1 = unused block
    num_pairs: int
    block_m: int


@dataclass(frozen=True)
class ExpertGroups:
    """Valid pairs sorted by expert (stable), for the torch reference's grouped GEMM."""

    sorted_pairs: torch.Tensor  # [num_valid] int64 pair ids
    group_ends: torch.Tensor  # [num_experts] int32 exclusive end offset of each expert's run
    counts: torch.Tensor  # [num_experts] int64 pairs per expert


def _valid_sort(topk_ids: torch.Tensor, num_experts: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    flat = topk_ids.reshape(-1).long()
    valid = (flat >= 0) & (flat < num_experts)
    key = torch.where(valid, flat, num_experts)  # dropped pairs sort last
    order = torch.argsort(key, stable=True)
    counts = torch.bincount(flat[valid], minlength=num_experts)
    return order, key[order], counts


def group_pairs_by_expert(topk_ids: torch.Tensor, num_experts: int) -> ExpertGroups:
    order, _, counts = _valid_sort(topk_ids, num_experts)
    ends = torch.cumsum(counts, 0)
    num_valid = int(ends[-1]) if num_experts else 0
    return ExpertGroups(sorted_pairs=order[:num_valid], group_ends=ends.to(torch.int32), counts=counts)


def align_pairs_by_expert(topk_ids: torch.Tensor, num_experts: int, block_m: int) -> ExpertBlocks:
    num_pairs = topk_ids.numel()
    device = topk_ids.device
    # Upper bound: every expert that gets a pair wastes at most block_m - 1 padding entries.
    capacity = num_pairs + min(num_experts, num_pairs) * (block_m - 1)
    num_blocks = max(1, -(-capacity // block_m))
    order, sorted_expert, counts = _valid_sort(topk_ids, num_experts)

    padded = (counts + block_m - 1) // block_m * block_m
    padded_end = torch.cumsum(padded, 0)
    padded_start = padded_end - padded
    start = torch.cumsum(counts, 0) - counts

    valid = sorted_expert < num_experts
    e = sorted_expert.clamp(max=num_experts - 1)
    rank_in_expert = torch.arange(num_pairs, device=device) - start[e]
    dest = padded_start[e] + rank_in_expert

    sorted_pairs = torch.full((num_blocks * block_m,), num_pairs, dtype=torch.int32, device=device)
    sorted_pairs[dest[valid]] = order[valid].to(torch.int32)

    block_starts = torch.arange(num_blocks, device=device) * block_m
    block_expert = torch.searchsorted(padded_end, block_starts, right=True)
    block_expert = torch.where(block_expert < num_experts, block_expert, -1).to(torch.int32)
    return ExpertBlocks(sorted_pairs=sorted_pairs, block_expert=block_expert, num_pairs=num_pairs, block_m=block_m)
