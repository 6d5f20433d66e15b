"""GLM-5.3-Flash feed-forward blocks: SwiGLU with the clamp limit, dense or as a 288-expert MoE.

The clamp (transformers' Glm5Next MLP and experts): gate <= swiglu_limit, up in [-limit, limit],
then silu(gate) * up. Routing is GLM-5's sigmoid + e_score_correction_bias router, imported from
inference/layers/moe.py (identical math). Experts run as grouped GEMMs over the assignments sorted
by expert (one GEMM pair per active expert where grouped_mm does not apply), never per token.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from inference.glm5_next.config import Glm5NextTextConfig
from inference.layers.moe import _GROUPED_DTYPES, TopkRouter, _grouped_mm


def clamped_swiglu(gate: torch.Tensor, up: torch.Tensor, limit: float) -> torch.Tensor:
    return F.silu(gate.clamp(max=limit)) * up.clamp(-limit, limit)


class ClampedSwiGLU(nn.Module):
    def __init__(self, hidden: int, intermediate: int, limit: float):
        super().__init__()
        self.gate_proj = nn.Linear(hidden, intermediate, bias=False)
        self.up_proj = nn.Linear(hidden, intermediate, bias=False)
        self.down_proj = nn.Linear(intermediate, hidden, bias=False)
        self.limit = limit

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(clamped_swiglu(self.gate_proj(x), self.up_proj(x), self.limit))


class ClampedExperts(nn.Module):
    """Packed experts: gate_up_proj [E, 2I, H] (gate rows, then up rows), down_proj [E, H, I]."""

    def __init__(self, config: Glm5NextTextConfig):
        super().__init__()
        e, h, i = config.n_routed_experts, config.hidden_size, config.moe_intermediate_size
        self.gate_up_proj = nn.Parameter(torch.empty(e, 2 * i, h))
        self.down_proj = nn.Parameter(torch.empty(e, h, i))
        self.limit = config.swiglu_limit

    def forward(self, x: torch.Tensor, ids: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
        return run_experts(x, ids, weights, self.gate_up_proj, self.down_proj, self.limit)


def run_experts(x: torch.Tensor, ids: torch.Tensor, weights: torch.Tensor, gate_up: torch.Tensor,
                down: torch.Tensor, limit: float, n_routed: int | None = None) -> torch.Tensor:
    """x [N, H], ids / weights [N, k] into the stacks gate_up [E, 2I, H], down [E, H, I]. n_routed:
    the model's expert count when the stacks hold only some experts (ids renumbered into them);
    it picks grouped vs per-expert GEMMs as for the full stacks, so the result is the same."""
    n, k = ids.shape
    n_experts = gate_up.shape[0]
    flat = ids.reshape(-1)
    order = flat.argsort(stable=True)
    counts = torch.bincount(flat, minlength=n_experts)
    token = order // k
    xs = x.index_select(0, token)
    grouped = n * k >= (n_routed or n_experts)
    if _grouped_mm is not None and x.dtype in _GROUPED_DTYPES.get(x.device.type, ()) and grouped:
        ends = counts.cumsum(0).to(torch.int32)
        gate, up_ = _grouped_mm(xs, gate_up.transpose(1, 2), offs=ends).chunk(2, dim=-1)
        ys = _grouped_mm(clamped_swiglu(gate, up_, limit), down.transpose(1, 2), offs=ends)
    else:
        ys = torch.empty_like(xs)
        start = 0
        for e, c in enumerate(counts.tolist()):  # one GEMM pair per expert that got tokens
            if c:
                gate, up_ = F.linear(xs[start : start + c], gate_up[e]).chunk(2, dim=-1)
                ys[start : start + c] = F.linear(clamped_swiglu(gate, up_, limit), down[e])
                start += c
    ys = ys * weights.reshape(-1)[order].unsqueeze(-1).to(ys.dtype)
    return torch.zeros_like(x).index_add_(0, token, ys)


class FlashMoE(nn.Module):
    def __init__(self, config: Glm5NextTextConfig):
        super().__init__()
        self.gate = TopkRouter(config)  # duck-typed: reads the same routing fields
        self.experts = ClampedExperts(config)
        self.shared_experts = ClampedSwiGLU(
            config.hidden_size, config.moe_intermediate_size * config.n_shared_experts, config.swiglu_limit
        ) if config.n_shared_experts else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        shape = x.shape
        flat = x.reshape(-1, shape[-1])
        ids, weights = self.gate(flat)
        out = self.experts(flat, ids, weights)
        if self.shared_experts is not None:
            out = out + self.shared_experts(flat)
        return out.view(shape)
