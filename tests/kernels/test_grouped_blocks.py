"""The group-sorted block layout that the MoE and indexer kernels rely on (property-tested)."""

from __future__ import annotations

import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from kernels.grouped_blocks import group_into_blocks, sort_by_group


@settings(max_examples=60, deadline=None, derandomize=True, database=None)
@given(
    tokens=st.integers(0, 40),
    top_k=st.integers(1, 4),
    num_experts=st.integers(1, 9),
    block_m=st.sampled_from([1, 4, 16]),
    seed=st.integers(0, 2**16),
)
def test_block_layout_invariants(tokens, top_k, num_experts, block_m, seed):
    """MoE-shaped ids: items are (token, k) pairs, groups are experts."""
    gen = torch.Generator().manual_seed(seed)
    ids = torch.randint(-1, num_experts + 1, (tokens, top_k), generator=gen)  # includes non-local ids
    blocks = group_into_blocks(ids, num_experts, block_m)
    n_pairs = tokens * top_k
    flat = ids.reshape(-1)
    sorted_pairs = blocks.sorted_items.view(-1, block_m).long()
    real = sorted_pairs < n_pairs
    # every local pair appears exactly once; non-local ones never
    local = ((flat >= 0) & (flat < num_experts)).nonzero().flatten()
    assert torch.equal(sorted_pairs[real].sort().values, local)
    # every real entry sits in a block of its own expert; unused blocks hold only padding
    block_of_entry = blocks.block_group.long()[:, None].expand_as(sorted_pairs)
    assert torch.equal(flat[sorted_pairs[real]], block_of_entry[real])
    assert not real[blocks.block_group < 0].any()
    # the layout size depends on the shapes only, never on the routing
    capacity = n_pairs + min(num_experts, n_pairs) * (block_m - 1)
    assert blocks.block_group.numel() == max(1, -(-capacity // block_m))


def test_sort_by_group_is_stable_and_drops_foreign_ids():
    ids = torch.tensor([2, 0, -1, 2, 0, 7, 1])
    groups = sort_by_group(ids, 3)
    assert groups.sorted_items.tolist() == [1, 4, 6, 0, 3]
    assert groups.counts.tolist() == [2, 1, 2] and groups.group_ends.tolist() == [2, 3, 5]
