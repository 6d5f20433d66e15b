"""Concatenate linear layers that read the same input into one GEMM, without a second copy.

After loading, the fused weight is allocated once and every original `nn.Linear.weight` becomes
a row-slice view of it, so state_dict names and memory use stay what they were. One GEMM instead
of several matters on the decode path, where each op costs more in overhead than in arithmetic.
"""

from __future__ import annotations

import torch
from torch import nn


def fuse_linears(linears: list[nn.Linear]) -> torch.Tensor:
    fused = torch.cat([lin.weight.detach() for lin in linears])
    start = 0
    for lin in linears:
        rows = lin.weight.shape[0]
        lin.weight = nn.Parameter(fused[start : start + rows], requires_grad=False)
        start += rows
    return fused
