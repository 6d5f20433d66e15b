"""GLM-5.3-Flash weights kept FP8 e4m3 in memory (`weight_format="fp8"`, W8A16), as for GLM-5.x.

`make_fp8_resident` swaps, on the meta-built model, every bias-free `nn.Linear` whose checkpoint
weight is FP8 for layers/fp8_linear.Fp8Linear (same attribute name: the state_dict keeps the
checkpoint's names, `X.weight` e4m3 + `X.weight_scale_inv`), and every FP8 expert stack for
`Fp8ClampedExperts`. Per call a weight is dequantized into the activation dtype with the loader's
own `dequantize_blockwise` (experts: only those the batch routes to), so the logits are the same
bits as with dequantize-at-load while each weight costs one byte at rest. Dequantized at load
whatever the format (`DEQUANTIZED_AT_LOAD`): `self_attn.kv_b_proj` (the absorbed attention views
its weight), the indexer's `weights_proj` (its input is cast to its weight's dtype) and the
lm_head (the model's dtype is read from it).

Not here: "fp8_w8a8" (kernels/fused_moe_fp8 has no SwiGLU clamp, which Flash's experts need).
"""

from __future__ import annotations

import re
from typing import Callable

import torch
from torch import nn

from inference.fp8 import dequantize_blockwise, scale_shape
from inference.glm5_next.config import Glm5NextTextConfig
from inference.glm5_next.ffn import ClampedExperts, run_experts
from inference.layers.fp8_linear import E4M3, Fp8Linear

DEQUANTIZED_AT_LOAD = re.compile(r"(self_attn\.(kv_b_proj|indexer\.weights_proj)|^lm_head)$")

class Fp8ClampedExperts(ClampedExperts):
    """gate_up_proj [E, 2I, H] e4m3 + gate_up_proj_scale_inv [E, 2I/bo, ceil(H/bi)], down_proj
    [E, H, I] e4m3 + down_proj_scale_inv [E, ceil(H/bo), ceil(I/bi)] (gate rows, then up rows per
    expert: I must be a multiple of bo, so no scale row mixes the two)."""

    def __init__(self, config: Glm5NextTextConfig, block: tuple[int, int]):
        nn.Module.__init__(self)
        e, h, i = config.n_routed_experts, config.hidden_size, config.moe_intermediate_size
        if i % block[0]:
            raise ValueError(f"moe_intermediate_size={i} is not a multiple of the FP8 row block {block[0]}: packed "
                             "gate/up experts cannot keep their block scales (use weight_format='dequant')")
        self.block, self.limit = tuple(block), config.swiglu_limit
        self.gate_up_proj = nn.Parameter(torch.empty(e, 2 * i, h, dtype=E4M3), requires_grad=False)
        self.gate_up_proj_scale_inv = nn.Parameter(torch.empty(e, *scale_shape((2 * i, h), block)), requires_grad=False)
        self.down_proj = nn.Parameter(torch.empty(e, h, i, dtype=E4M3), requires_grad=False)
        self.down_proj_scale_inv = nn.Parameter(torch.empty(e, *scale_shape((h, i), block)), requires_grad=False)

    def forward(self, x: torch.Tensor, ids: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
        n_experts = self.gate_up_proj.shape[0]
        active = torch.unique(ids)
        remap = torch.full((n_experts,), -1, dtype=ids.dtype, device=ids.device)
        remap[active] = torch.arange(active.numel(), dtype=ids.dtype, device=ids.device)
        gate_up = dequantize_blockwise(self.gate_up_proj[active], self.gate_up_proj_scale_inv[active], self.block, x.dtype)
        down = dequantize_blockwise(self.down_proj[active], self.down_proj_scale_inv[active], self.block, x.dtype)
        return run_experts(x, remap[ids], weights, gate_up, down, self.limit, n_routed=n_experts)


def make_fp8_resident(model: nn.Module, config: Glm5NextTextConfig, block: tuple[int, int],
                      is_fp8: Callable[[str], bool]) -> list[str]:
    """Swap modules in place (under `torch.device("meta")`); `is_fp8(param name)` says whether the
    checkpoint stores that weight in FP8. Returns the swapped module names."""
    swapped = []
    for name, module in list(model.named_modules()):
        if isinstance(module, nn.Linear) and module.bias is None and not DEQUANTIZED_AT_LOAD.search(name):
            if not is_fp8(f"{name}.weight"):
                continue
            new = Fp8Linear(module.in_features, module.out_features, block, "fp8")
        elif type(module) is ClampedExperts:
            if not is_fp8(f"{name}.0.gate_proj.weight"):
                continue
            new = Fp8ClampedExperts(config, block)
        else:
            continue
        parent, _, child = name.rpartition(".")
        setattr(model.get_submodule(parent), child, new)
        swapped.append(name)
    return swapped
