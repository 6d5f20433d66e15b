"""Interleaved (GPT-J pair) rotary embedding, shared by MLA and the DSA indexer.

Pairs (x0, x1), (x2, x3), ... are rotated by frequency j = pair index. The rotated values are
written in transformers' layout: all even-pair outputs first, then all odd-pair outputs
(`[x0', x2', ..., x1', x3', ...]`). That is a fixed permutation of vLLM's in-place layout, applied
identically to queries and keys, so every dot product is unchanged; we keep it because it makes our
cached rope keys byte-comparable with transformers' cache (checked in the parity tests).
"""

from __future__ import annotations

import torch


def rope_cos_sin(
    positions: torch.Tensor, rope_dim: int, theta: float, dtype: torch.dtype
) -> tuple[torch.Tensor, torch.Tensor]:
    """cos/sin of shape [N, rope_dim // 2] for absolute positions [N] (angles computed in fp32)."""
    inv_freq = 1.0 / (theta ** (torch.arange(0, rope_dim, 2, dtype=torch.float, device=positions.device) / rope_dim))
    angles = positions.float().unsqueeze(-1) * inv_freq
    return angles.cos().to(dtype), angles.sin().to(dtype)


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate x [N, ..., rope_dim]; cos/sin [N, rope_dim // 2] broadcast over the middle dims."""
    shape = (cos.shape[0],) + (1,) * (x.dim() - 2) + (cos.shape[1],)
    cos, sin = cos.view(shape), sin.view(shape)
    even, odd = x[..., 0::2], x[..., 1::2]
    return torch.cat([even * cos - odd * sin, odd * cos + even * sin], dim=-1)
