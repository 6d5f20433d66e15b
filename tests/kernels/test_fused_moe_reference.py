"""The torch MoE reference against transformers' GlmMoeDsaExperts (the oracle), and the
expert-sorted block layout the Triton kernels rely on (property-tested)."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from transformers import GlmMoeDsaConfig
from transformers.models.glm_moe_dsa import modeling_glm_moe_dsa as hf

from kernels.fused_moe import fused_moe
from kernels.moe_align import align_pairs_by_expert


@pytest.mark.parametrize("hidden,inter", [(64, 32), (30, 20)])  # the second misses grouped_mm's 16-byte alignment
def test_matches_transformers_experts(hidden, inter):
    torch.manual_seed(0)
    cfg = GlmMoeDsaConfig(hidden_size=hidden, moe_intermediate_size=inter, n_routed_experts=6, num_experts_per_tok=3)
    experts = hf.GlmMoeDsaExperts(cfg)
    with torch.no_grad():
        experts.gate_up_proj.normal_(std=hidden**-0.5)
        experts.down_proj.normal_(std=inter**-0.5)
        x = torch.randn(11, hidden)
        ids = torch.stack([torch.randperm(6)[:3] for _ in range(11)])
        weights = torch.rand(11, 3)
        want = experts(x, ids, weights)
        got = fused_moe(x, experts.gate_up_proj, experts.down_proj, ids, weights, backend="torch")
    torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)


def test_non_local_experts_contribute_nothing():
    torch.manual_seed(1)
    x, gate_up, down = torch.randn(4, 32), torch.randn(3, 16, 32), torch.randn(3, 32, 8)
    ids = torch.tensor([[0, 1], [-1, 2], [5, -1], [1, 1]])
    weights = torch.rand(4, 2)
    out = fused_moe(x, gate_up, down, ids, weights, backend="torch")
    assert torch.equal(out[2], torch.zeros(32))
    only_local = fused_moe(x[1:2], gate_up, down, ids[1:2, 1:], weights[1:2, 1:], backend="torch")
    torch.testing.assert_close(out[1:2], only_local)


@settings(max_examples=60, deadline=None)
@given(
    tokens=st.integers(0, 40),
    top_k=st.integers(1, 4),
    num_experts=st.integers(1, 9),
    block_m=st.sampled_from([1, 4, 16]),
    seed=st.integers(0, 2**16),
)
def test_block_layout_invariants(tokens, top_k, num_experts, block_m, seed):
    gen = torch.Generator().manual_seed(seed)
    ids = torch.randint(-1, num_experts + 1, (tokens, top_k), generator=gen)  # includes non-local ids
    blocks = align_pairs_by_expert(ids, num_experts, block_m)
    n_pairs = tokens * top_k
    flat = ids.reshape(-1)
    sorted_pairs = blocks.sorted_pairs.view(-1, block_m).long()
    real = sorted_pairs < n_pairs
    # every local pair appears exactly once; non-local ones never
    local = ((flat >= 0) & (flat < num_experts)).nonzero().flatten()
    assert torch.equal(sorted_pairs[real].sort().values, local)
    # every real entry sits in a block of its own expert; unused blocks hold only padding
    block_of_entry = blocks.block_expert.long()[:, None].expand_as(sorted_pairs)
    assert torch.equal(flat[sorted_pairs[real]], block_of_entry[real])
    assert not real[blocks.block_expert < 0].any()
    # the layout size depends on the shapes only, never on the routing
    capacity = n_pairs + min(num_experts, n_pairs) * (block_m - 1)
    assert blocks.block_expert.numel() == max(1, -(-capacity // block_m))
