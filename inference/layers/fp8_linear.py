"""Linear layers whose weights stay FP8 e4m3 in memory (128x128 block scales), scaleout.md §2.5.

`Fp8Linear` replaces an `nn.Linear` under the same attribute name, so its state_dict entries are
the checkpoint's own: `X.weight` (e4m3 [out, in]) and `X.weight_scale_inv` (fp32
[ceil(out/bo), ceil(in/bi)]). Two ways to multiply, chosen once by the model's `weight_format`:

- "fp8" (W8A16): dequantize the weight per call with the loader's own `dequantize_blockwise`
  into the activation dtype, then F.linear. The same values in the same layout as dequantize-at-
  load ("dequant"), so the logits are bit-identical; the weight costs half the bytes (bf16) at rest.
- "fp8_w8a8": quantize the activation per token in 1 x bi groups and run the block-scaled FP8 GEMM
  (kernels/fp8_gemm.py: Triton on CUDA, its exact torch reference on CPU).

`Fp8Weight` is the tensor-pair behind both, also used for fused projections (q_a + kv_a, gate +
up): rows of FP8 weights concatenate like any weights as long as every part but the last ends on
a row-block boundary, because then every scale row still covers rows of one part only.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from inference.fp8 import dequantize_blockwise, scale_shape

E4M3 = torch.float8_e4m3fn
RESIDENT_FORMATS = ("fp8", "fp8_w8a8")
WEIGHT_FORMATS = ("dequant", *RESIDENT_FORMATS)


def check_weight_format(value: str) -> str:
    if value not in WEIGHT_FORMATS:
        raise ValueError(f"weight_format={value!r}: expected one of {WEIGHT_FORMATS}")
    return value


@dataclass
class Fp8Weight:
    q: torch.Tensor  # [out, in] e4m3
    scale: torch.Tensor  # [ceil(out/bo), ceil(in/bi)] fp32
    block: tuple[int, int]
    mode: str = "fp8"
    # Dequantize into the input-major layout that dequantize-at-load gives this weight on CPU
    # (fusion.column_major), so both formats run the very same GEMM.
    input_major: bool = False

    def dequantize(self, dtype: torch.dtype) -> torch.Tensor:
        if self.q.is_cuda and all(b >= 16 and b & (b - 1) == 0 for b in self.block):
            # One Triton pass (kernels.fp8_gemm.weight_dequant): the same fp32 product and
            # round-to-nearest cast as dequantize_blockwise, so the values are the same bits.
            from kernels.fp8_gemm import weight_dequant

            return weight_dequant(self.q, self.scale, self.block, dtype)
        w = dequantize_blockwise(self.q, self.scale, self.block, dtype)
        return w.transpose(-1, -2).contiguous().transpose(-1, -2) if self.input_major else w

    def linear(self, x: torch.Tensor) -> torch.Tensor:
        if self.mode == "fp8_w8a8":
            from kernels.fp8_gemm import w8a8_linear

            return w8a8_linear(x, self.q, self.scale, self.block)
        return F.linear(x, self.dequantize(x.dtype))


def linear(x: torch.Tensor, weight: torch.Tensor | Fp8Weight) -> torch.Tensor:
    """F.linear for a fused weight that may be a plain tensor or an `Fp8Weight`."""
    return weight.linear(x) if isinstance(weight, Fp8Weight) else F.linear(x, weight)


class Fp8Linear(nn.Module):
    """A bias-free linear layer holding its checkpoint's e4m3 weight and block scales."""

    def __init__(self, in_features: int, out_features: int, block: tuple[int, int], mode: str = "fp8"):
        super().__init__()
        if mode not in RESIDENT_FORMATS:
            raise ValueError(f"Fp8Linear mode={mode!r}: expected one of {RESIDENT_FORMATS}")
        self.in_features, self.out_features = in_features, out_features
        self.block = tuple(block)
        self.mode = mode
        self.input_major = False
        self.weight = nn.Parameter(torch.empty(out_features, in_features, dtype=E4M3), requires_grad=False)
        shape = scale_shape((out_features, in_features), self.block)
        self.weight_scale_inv = nn.Parameter(torch.empty(shape, dtype=torch.float32), requires_grad=False)
        self.register_load_state_dict_post_hook(lambda module, _: module.tag_weight())
        self.tag_weight()

    def tag_weight(self) -> None:
        """Mark the e4m3 parameter with its block (rope.deinterleave_rope_rows checks that a row
        permutation stays inside row blocks); loading with assign=True replaces the parameter."""
        self.weight.fp8_block = self.block

    def fp8_weight(self) -> Fp8Weight:
        return Fp8Weight(self.weight, self.weight_scale_inv, self.block, self.mode, self.input_major)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fp8_weight().linear(x)

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, block={self.block}, mode={self.mode}"


def fuse_fp8_linears(linears: list[Fp8Linear], input_major: bool = False) -> Fp8Weight:
    """Concatenate the rows (and scale rows) of FP8 linears that read the same input into one
    weight; each original becomes a row view of it (one copy in memory, as fusion.fuse_linears)."""
    first = linears[0]
    bo = first.block[0]
    for lin in linears[:-1]:
        if lin.block != first.block or lin.out_features % bo:
            raise ValueError(
                f"cannot fuse FP8 linears: a part with {lin.out_features} rows does not end on a {bo}-row "
                f"scale block (blocks {lin.block} vs {first.block})"
            )
    q = torch.cat([lin.weight.detach() for lin in linears])
    scale = torch.cat([lin.weight_scale_inv.detach() for lin in linears])
    row = srow = 0
    for lin in linears:
        n, ns = lin.out_features, lin.weight_scale_inv.shape[0]
        lin.weight = nn.Parameter(q[row : row + n], requires_grad=False)
        lin.weight_scale_inv = nn.Parameter(scale[srow : srow + ns], requires_grad=False)
        lin.tag_weight()
        row, srow = row + n, srow + ns
    return Fp8Weight(q, scale, first.block, first.mode, input_major)
