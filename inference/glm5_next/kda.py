"""Kimi Delta Attention (KDA), GLM-5.3-Flash's linear-attention layer (layer i with i % 4 != 3).

x -> q/k/v projections -> short causal depthwise conv (kernel K, SiLU) over the concatenated
qkv -> L2-normalized q, k; per-channel forget gate g = lb * sigmoid(exp(A_log) * (f_b(f_a(x)) +
dt_bias)) (the "safe gate"; softplus form without a lower bound) and beta = sigmoid(b_proj(x)) ->
delta rule (delta_rule.py) -> per-head RMSNorm gated by sigmoid(g_b(g_a(x))) -> o_proj.

The per-sequence state is constant-size: the last K-1 conv inputs and the [H, Dk, Dv] fp32
recurrent state (`KdaState`). A forward over a chunk of new tokens carries both, so a prefill
split into chunks equals a one-shot prefill; a one-token step is the recurrent form.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from inference.glm5_next import delta_rule
from inference.glm5_next.config import Glm5NextTextConfig


@dataclass
class KdaState:
    conv: torch.Tensor  # [B, 3 * H * D, K - 1] fp32: the last K-1 pre-conv qkv inputs
    recurrent: torch.Tensor  # [B, H, Dk, Dv] fp32

    @classmethod
    def zeros(cls, config: Glm5NextTextConfig, batch: int, device) -> KdaState:
        d, h = config.linear_head_dim, config.linear_num_heads
        conv = torch.zeros(batch, 3 * h * d, config.linear_conv_kernel_dim - 1, device=device)
        return cls(conv, torch.zeros(batch, h, d, d, device=device))


class ForgetGate(nn.Module):
    def __init__(self, config: Glm5NextTextConfig):
        super().__init__()
        self.head_dim, self.num_heads = config.linear_head_dim, config.linear_num_heads
        self.f_a_proj = nn.Linear(config.hidden_size, self.head_dim, bias=False)
        self.f_b_proj = nn.Linear(self.head_dim, config.linear_dim, bias=False)
        self.dt_bias = nn.Parameter(torch.zeros(config.linear_dim, dtype=torch.float32))
        self.A_log = nn.Parameter(torch.zeros(self.num_heads, dtype=torch.float32))
        self.lower_bound = config.linear_lower_bound

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x [B, T, hidden] -> log decay g [B, T, H, Dk] fp32 (<= 0)."""
        f = self.f_b_proj(self.f_a_proj(x)).float() + self.dt_bias.float()
        f = f.view(*x.shape[:2], self.num_heads, self.head_dim)
        rate = self.A_log.float().exp().view(1, 1, -1, 1)
        if self.lower_bound is not None:
            return self.lower_bound * torch.sigmoid(rate * f)
        return -rate * torch.where(f > 20.0, f, torch.log1p(torch.exp(f)))


class GatedHeadNorm(nn.Module):
    """RMSNorm over each head's channels in fp32, times sigmoid(gate) (transformers' RMSNormGated)."""

    def __init__(self, dim: int, eps: float):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x: torch.Tensor, gate: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
        y = F.rms_norm(x.float(), (x.shape[-1],), self.weight.float(), self.eps)
        return (y * torch.sigmoid(gate.float())).to(dtype)


class KimiDeltaAttention(nn.Module):
    def __init__(self, config: Glm5NextTextConfig):
        super().__init__()
        h, d, dim = config.hidden_size, config.linear_head_dim, config.linear_dim
        self.num_heads, self.head_dim, self.kernel = config.linear_num_heads, d, config.linear_conv_kernel_dim
        self.q_proj = nn.Linear(h, dim, bias=False)
        self.k_proj = nn.Linear(h, dim, bias=False)
        self.v_proj = nn.Linear(h, dim, bias=False)
        # Depthwise causal conv over [q | k | v] channels; weight [3 * dim, 1, K] kept in fp32.
        self.conv1d = nn.Conv1d(3 * dim, 3 * dim, self.kernel, groups=3 * dim, bias=False, dtype=torch.float32)
        self.forget_gate = ForgetGate(config)
        self.b_proj = nn.Linear(h, self.num_heads, bias=False)
        self.g_a_proj = nn.Linear(h, d, bias=False)
        self.g_b_proj = nn.Linear(d, dim, bias=False)
        self.o_norm = GatedHeadNorm(d, config.rms_norm_eps)
        self.o_proj = nn.Linear(dim, h, bias=False)
        self.chunk = delta_rule.chunk_size_for(config.linear_lower_bound)
        self.bounded = config.linear_lower_bound is not None
        # "chunked" (default) or "recurrent" (the per-token reference; tests and benchmarks).
        self.prefill_form = "chunked"

    def _conv(self, qkv: torch.Tensor, state: KdaState | None, lengths: torch.Tensor | None) -> torch.Tensor:
        """qkv [B, T, C] -> SiLU(causal depthwise conv) [B, T, C]; updates state.conv to the
        K-1 inputs before each row's end (lengths[b], right padding after it)."""
        b, t, c = qkv.shape
        x = qkv.transpose(1, 2).float()
        past = state.conv if state is not None else x.new_zeros(b, c, self.kernel - 1)
        full = torch.cat([past, x], dim=-1)  # [B, C, K - 1 + T]
        if state is not None and self.kernel > 1:
            if lengths is None:
                state.conv = full[..., -(self.kernel - 1) :].clone()
            else:  # full index j holds input j - (K - 1): the window is [len_b, len_b + K - 1)
                idx = lengths.view(b, 1, 1) + torch.arange(self.kernel - 1, device=x.device).view(1, 1, -1)
                state.conv = full.gather(-1, idx.expand(b, c, -1))
        y = F.conv1d(full, self.conv1d.weight.float(), groups=c)  # length T: valid conv over the window
        return F.silu(y).to(qkv.dtype).transpose(1, 2)

    def forward(self, x: torch.Tensor, state: KdaState | None = None, lengths: torch.Tensor | None = None) -> torch.Tensor:
        """x [B, T, hidden] (after input_layernorm) -> [B, T, hidden]; state updated in place.
        lengths [B]: valid tokens per row (right padding after them leaves the state untouched:
        those steps get beta = 0, no write, and g = 0, no decay); None = all valid."""
        b, t, _ = x.shape
        shape = (b, t, self.num_heads, self.head_dim)
        qkv = self._conv(torch.cat([self.q_proj(x), self.k_proj(x), self.v_proj(x)], dim=-1), state, lengths)
        q, k, v = (part.reshape(shape).float() for part in qkv.chunk(3, dim=-1))
        q = delta_rule.l2norm(q) * self.head_dim**-0.5
        k = delta_rule.l2norm(k)
        g = self.forget_gate(x)
        beta = torch.sigmoid(self.b_proj(x)).float()
        if lengths is not None:
            valid = torch.arange(t, device=x.device).view(1, t) < lengths.view(b, 1)
            beta = beta * valid.unsqueeze(-1)
            g = g * valid.view(b, t, 1, 1)
        init = state.recurrent if state is not None else None
        if t == 1 or self.prefill_form == "recurrent":
            o, final = delta_rule.recurrent(q, k, v, g, beta, init)
        else:
            o, final = delta_rule.chunked(q, k, v, g, beta, init, self.chunk, self.bounded)
        if state is not None:
            state.recurrent = final
        gate = self.g_b_proj(self.g_a_proj(x)).view(shape)
        return self.o_proj(self.o_norm(o, gate, x.dtype).reshape(b, t, -1))
