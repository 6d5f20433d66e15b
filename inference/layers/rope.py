"""Interleaved (GPT-J pair) rotary embedding, shared by MLA and the DSA indexer.

Pairs (x0, x1), (x2, x3), ... are rotated by frequency j = pair index, theta_j = theta^(-2j/d).
The rotated values are produced in transformers' layout: all even-pair outputs first, then all
odd-pair outputs (`[x0', x2', ..., x1', x3', ...]`). That is a fixed permutation of vLLM's
in-place layout, applied identically to queries and keys, so every dot product is unchanged; we
keep it because our cached rope keys are then byte-comparable with transformers' cache (checked
in the parity tests).

Two ways to get there:
- `interleaved`: rotate the checkpoint's interleaved pairs directly (weights as on disk);
- `halves`: after `deinterleave_rope_rows` permuted the projection rows that produce the rope
  slice, the projection already emits [evens | odds] and the rotation is the cheap half-split
  form x * cos + roll(x, d/2) * sin. The loader does this once; the result is identical.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass
class RopeTables:
    """cos / signed sin of every new token of a step: [N, d] as [c | c] and [-s | s]."""

    cos: torch.Tensor
    sin: torch.Tensor

    @classmethod
    def build(
        cls, positions: torch.Tensor, rope_dim: int, theta: float, dtype: torch.dtype, inv_freq: torch.Tensor | None = None
    ) -> RopeTables:
        if inv_freq is None:
            inv_freq = inverse_frequencies(rope_dim, theta, positions.device)
        angles = positions.float().unsqueeze(-1) * inv_freq
        cos, sin = angles.cos().to(dtype), angles.sin().to(dtype)  # rounded like transformers
        return cls(torch.cat([cos, cos], -1), torch.cat([-sin, sin], -1))

    def _shaped(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        if x.dim() == 2:
            return self.cos, self.sin
        shape = (self.cos.shape[0],) + (1,) * (x.dim() - 2) + (self.cos.shape[1],)
        return self.cos.view(shape), self.sin.view(shape)

    def halves(self, x: torch.Tensor) -> torch.Tensor:
        """x [N, ..., d] already in [evens | odds] order."""
        cos, sin = self._shaped(x)
        return x * cos + x.roll(x.shape[-1] // 2, dims=-1) * sin

    def interleaved(self, x: torch.Tensor) -> torch.Tensor:
        """x [N, ..., d] in the checkpoint's interleaved order."""
        cos, sin = self._shaped(x)
        half = x.shape[-1] // 2
        even, odd = x[..., 0::2], x[..., 1::2]
        c, s = cos[..., :half], sin[..., half:]
        return torch.cat([even * c - odd * s, odd * c + even * s], dim=-1)

    def apply(self, x: torch.Tensor, deinterleaved: bool) -> torch.Tensor:
        return self.halves(x) if deinterleaved else self.interleaved(x)


def inverse_frequencies(rope_dim: int, theta: float, device: torch.device | str) -> torch.Tensor:
    return 1.0 / (theta ** (torch.arange(0, rope_dim, 2, dtype=torch.float, device=device) / rope_dim))


def deinterleave_rope_rows(weight: torch.Tensor, group: int, start: int, rope_dim: int) -> None:
    """In place: within every `group` rows (or entries of a vector), reorder rows start..start+rope_dim
    from (0,1,2,3,...) to (0,2,...,1,3,...), so the projection emits the rope slice as [evens | odds]."""
    perm = torch.cat([torch.arange(0, rope_dim, 2), torch.arange(1, rope_dim, 2)]).to(weight.device)
    if weight.dtype == torch.float8_e4m3fn:  # an FP8-resident weight: move the bytes, keep the scales
        _check_rows_within_blocks(weight, group, start, rope_dim)
        weight = weight.view(torch.uint8)
    cols = weight.shape[-1] if weight.dim() == 2 else 1  # 1-D: a per-channel vector (LayerNorm weight/bias)
    rows = weight.data.view(-1, group, cols)[:, start : start + rope_dim]
    rows.copy_(rows[:, perm].clone())


def _check_rows_within_blocks(weight: torch.Tensor, group: int, start: int, rope_dim: int) -> None:
    """Rows permuted among themselves must share one scale row (fp8_linear.Fp8Linear tags the
    block): then the e4m3 rows move and the block scales stay valid unchanged."""
    block = getattr(weight, "fp8_block", None)
    if block is None:
        raise ValueError(f"deinterleave_rope_rows: an e4m3 weight {tuple(weight.shape)} without its fp8_block tag")
    first = torch.arange(0, weight.shape[0], group) + start
    if not torch.equal(first // block[0], (first + rope_dim - 1) // block[0]):
        raise ValueError(
            f"deinterleave_rope_rows: rope rows {start}..{start + rope_dim - 1} of every {group}-row group cross a "
            f"{block[0]}-row FP8 scale block; load this model with weight_format='dequant'"
        )
