"""FP8 e4m3 block quantization with per-block fp32 scales (DeepSeek/GLM checkpoint format).

A quantized `X.weight` [out, in] (float8_e4m3fn) has a sibling `X.weight_scale_inv`
[ceil(out/bo), ceil(in/bi)] (fp32) and W = W8 * scale_inv (despite the name the scale multiplies).
"""

from __future__ import annotations

import math

import torch

E4M3_MAX = 448.0
DEFAULT_BLOCK = (128, 128)
_E4M3_TO_FP32 = torch.arange(256, dtype=torch.uint8).view(torch.float8_e4m3fn).float()


def scale_shape(shape: tuple[int, int], block: tuple[int, int] = DEFAULT_BLOCK) -> tuple[int, int]:
    return (math.ceil(shape[0] / block[0]), math.ceil(shape[1] / block[1]))


def _expand(scale: torch.Tensor, shape: tuple[int, int], block: tuple[int, int]) -> torch.Tensor:
    return scale.repeat_interleave(block[0], -2)[..., : shape[0], :].repeat_interleave(block[1], -1)[..., : shape[1]]


def quantize_blockwise(
    weight: torch.Tensor, block: tuple[int, int] = DEFAULT_BLOCK
) -> tuple[torch.Tensor, torch.Tensor]:
    """weight [..., out, in] -> (e4m3 weight, fp32 scale_inv) with one scale per block, on the
    weight's device (partial last blocks take the amax of the rows/columns they have)."""
    if weight.dim() < 2:
        raise ValueError(f"quantize_blockwise: expected a 2-D weight, got shape {tuple(weight.shape)}")
    w = weight.float()
    *lead, n, k = w.shape
    rows, cols = scale_shape((n, k), block)
    padded = w.new_zeros(*lead, rows * block[0], cols * block[1])
    padded[..., :n, :k] = w.abs()
    amax = padded.view(*lead, rows, block[0], cols, block[1]).amax(dim=(-3, -1))
    scale = amax.clamp_min(1e-12) / E4M3_MAX
    q = (w / _expand(scale, (n, k), block)).clamp(-E4M3_MAX, E4M3_MAX).to(torch.float8_e4m3fn)
    return q, scale


def e4m3_to_float(weight: torch.Tensor) -> torch.Tensor:
    """e4m3 -> fp32, exact. On CPU a 256-entry table lookup (kv_formats.py measured it ~25x faster
    than torch's element cast); the values are the same either way."""
    if weight.device.type != "cpu" or weight.dtype != torch.float8_e4m3fn:
        return weight.float()
    codes = weight.contiguous().view(torch.uint8).reshape(-1).int()
    return _E4M3_TO_FP32.index_select(0, codes).view(weight.shape)


def dequantize_blockwise(
    weight: torch.Tensor, scale_inv: torch.Tensor, block: tuple[int, int] = DEFAULT_BLOCK, dtype=torch.float32
) -> torch.Tensor:
    """weight [..., out, in] (e4m3, or any float), scale_inv [..., ceil(out/bo), ceil(in/bi)] ->
    weight * scale per element, computed in fp32 and cast to dtype once. Every caller (the loader,
    the FP8-resident layers' per-call path) goes through here, so they agree bit for bit."""
    shape = tuple(weight.shape[-2:])
    expected = tuple(weight.shape[:-2]) + scale_shape(shape, block)
    if tuple(scale_inv.shape) != expected:
        raise ValueError(
            f"weight_scale_inv: shape {tuple(scale_inv.shape)}, expected {expected} for weight {tuple(weight.shape)} "
            f"with {block[0]}x{block[1]} blocks"
        )
    w = e4m3_to_float(weight)
    s = scale_inv.float()
    if shape[0] % block[0] == 0 and shape[1] % block[1] == 0:  # broadcast, no expanded scale copy
        lead = tuple(weight.shape[:-2])
        rows, cols = s.shape[-2:]
        blocks = w.reshape(*lead, rows, block[0], cols, block[1]) * s.view(*lead, rows, 1, cols, 1)
        return blocks.view(weight.shape).to(dtype)
    return (w * _expand(s, shape, block)).to(dtype)
