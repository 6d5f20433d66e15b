"""Dense SwiGLU MLP (layers before first_k_dense_replace, and the MoE shared expert).

Under tensor parallelism each rank holds a slice of the intermediate size (gate/up rows, down
columns) and returns its partial sum; the decoder layer reduces it."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from inference.layers.fp8_linear import linear
from inference.layers.fusion import fuse_linears, input_major_on_cpu
from inference.layers.partial_linear import partial_linear


class SwiGLU(nn.Module):
    def __init__(self, hidden_size: int, intermediate_size: int):
        super().__init__()
        self.gate_proj = nn.Linear(hidden_size, intermediate_size, bias=False)
        self.up_proj = nn.Linear(hidden_size, intermediate_size, bias=False)
        self.down_proj = nn.Linear(intermediate_size, hidden_size, bias=False)
        self.gate_up: torch.Tensor | None = None

    def fuse(self) -> None:
        on_cpu = self.down_proj.weight.device.type == "cpu"
        self.gate_up = fuse_linears([self.gate_proj, self.up_proj], input_major=on_cpu)
        input_major_on_cpu(self.down_proj)

    def forward(self, x: torch.Tensor, out_dtype: torch.dtype | None = None) -> torch.Tensor:
        """`out_dtype`: the output's (default x's); fp32 for a TP partial sum reduced in fp32."""
        if self.gate_up is None:
            hidden = F.silu(self.gate_proj(x)) * self.up_proj(x)
        else:
            gate, up = linear(x, self.gate_up).chunk(2, dim=-1)
            hidden = F.silu(gate) * up
        return partial_linear(self.down_proj, hidden, out_dtype or x.dtype)
