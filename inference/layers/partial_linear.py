"""A row-parallel projection (o_proj, an MLP's down_proj) whose output is a partial sum that a
reduce completes, written in the dtype that sum accumulates in (inference/parallel/partial_sums.py).

NOTE: with fp32 partial sums of bf16/fp16 activations the GEMM itself writes fp32: rounding each
rank's partial to bf16 before the reduce is what made TP=2 differ from one process (the reduce of
two bf16 addends is exact in fp32 either way). One process and the "model" reduce dtype take the
plain `layer(x)` path, bit for bit as before.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from inference.layers.fp8_linear import Fp8Linear


def partial_linear(layer: nn.Module, x: torch.Tensor, out_dtype: torch.dtype) -> torch.Tensor:
    """`layer(x)` (an nn.Linear or Fp8Linear, no bias) with its output in `out_dtype`."""
    if out_dtype == x.dtype:
        return layer(x)
    if isinstance(layer, Fp8Linear):
        if layer.mode == "fp8_w8a8":  # the block-scaled FP8 GEMM writes x's dtype
            return layer(x).to(out_dtype)
        weight = layer.fp8_weight().dequantize(x.dtype)
    else:
        weight = layer.weight
    if x.is_cuda:  # cuBLAS: bf16/fp16 inputs, fp32 accumulation written out as fp32
        rows = torch.mm(x.reshape(-1, x.shape[-1]), weight.t(), out_dtype=out_dtype)
        return rows.view(*x.shape[:-1], weight.shape[0])
    # CPU torch has no half-input GEMM with a wider output: the same values, up-cast, multiplied in fp32.
    return F.linear(x.to(out_dtype), weight.to(out_dtype))
