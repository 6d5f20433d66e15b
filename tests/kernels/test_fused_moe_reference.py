"""The torch MoE reference against transformers' GlmMoeDsaExperts (the oracle)."""

from __future__ import annotations

import pytest
import torch
from transformers import GlmMoeDsaConfig
from transformers.models.glm_moe_dsa import modeling_glm_moe_dsa as hf

from kernels.fused_moe import fused_moe


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
