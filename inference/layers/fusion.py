"""Concatenate linear layers that read the same input into one GEMM, without a second copy.

After loading, the fused weight is allocated once and every original `nn.Linear.weight` becomes
a row-slice view of it, so state_dict names and memory use stay what they were. One GEMM instead
of several matters on the decode path, where each op costs more in overhead than in arithmetic.
"""

from __future__ import annotations

import torch
from torch import nn

from inference.layers.fp8_linear import Fp8Linear, Fp8Weight, fuse_fp8_linears


def fuse_linears(linears: list[nn.Linear], input_major: bool = False) -> torch.Tensor | Fp8Weight:
    """input_major: store the fused weight like `column_major` (the views stay row slices).
    FP8-resident linears fuse into an `Fp8Weight` (fp8_linear.fuse_fp8_linears)."""
    if isinstance(linears[0], Fp8Linear):
        return fuse_fp8_linears(linears, input_major)
    first = linears[0].weight
    rows_total, cols = sum(lin.weight.shape[0] for lin in linears), first.shape[1]
    # Allocated once in its final layout and filled slice by slice: one extra copy of these
    # weights at a time, whichever layout (the loader's peak-memory bound counts on it).
    if input_major:
        fused = torch.empty(cols, rows_total, dtype=first.dtype, device=first.device).t()
    else:
        fused = torch.empty(rows_total, cols, dtype=first.dtype, device=first.device)
    start = 0
    for lin in linears:
        rows = lin.weight.shape[0]
        fused[start : start + rows].copy_(lin.weight.detach())
        lin.weight = nn.Parameter(fused[start : start + rows], requires_grad=False)
        start += rows
    return fused


def column_major(weight: torch.Tensor) -> nn.Parameter:
    """The same [.., out, in] values stored input-major (the last two dims transposed in memory).

    CPU BLAS multiplies x [N, in] by such a weight as a plain (non-transposed) GEMM, which streams
    the weight faster than the [out, in] row-major layout at decode batch sizes (measured 25% on the
    experts, 2x on lm_head, 1.5-2x on 256x1024 and 512x2048 projections at batch 1; not on the
    fused 512x496 input projection, which stays row-major). One layer's copy at a time."""
    return nn.Parameter(weight.detach().transpose(-1, -2).contiguous().transpose(-1, -2), requires_grad=False)


def input_major_on_cpu(*linears: nn.Linear) -> None:
    """`column_major` for these linears' weights when they live on the CPU (GPU GEMMs and the
    Triton kernels take the checkpoint's row-major layout)."""
    for lin in linears:
        if lin.weight.device.type != "cpu":
            continue
        if isinstance(lin, Fp8Linear):  # e4m3 bytes stay as loaded; dequantized copies come out input-major
            lin.input_major = True
        else:
            lin.weight = column_major(lin.weight)
