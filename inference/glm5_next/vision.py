"""GLM-5.3-Flash vision tower (transformers' Glm5NextVisionModel): patches -> image token embeddings.

pixel_values arrive already patchified by the processor: one row of C x T x P x P values per
patch, patches of an image ordered block-major over spatial_merge_size^2 blocks (transformers'
Glm5NextImageProcessor layout), `grid_thw` [n_images, 3] giving (t, h, w) in patches.
Conv3d patch embedding -> `depth` pre-norm blocks (RMSNorm; attention with per-head RMS-normed
q/k and axial 2D RoPE over the whole head dim, bidirectional within each frame; SwiGLU with the
clamp) -> RMSNorm -> Conv2d spatial merge -> merger (linear, LayerNorm, GELU, clamped SwiGLU)
-> one embedding of the text hidden size per merge block, which replaces an image token.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from inference.config import ConfigError
from inference.glm5_next.ffn import clamped_swiglu
from inference.layers.norm import RMSNorm


@dataclass(frozen=True)
class VisionConfig:
    depth: int = 24
    hidden_size: int = 1024
    num_heads: int = 16
    in_channels: int = 3
    patch_size: int = 14
    temporal_patch_size: int = 2
    spatial_merge_size: int = 2
    out_hidden_size: int = 1536
    intermediate_size: int = 4096
    projection_intermediate_size: int = 10240
    rms_norm_eps: float = 1e-5
    swiglu_limit: float = 10.0
    attention_bias: bool = True
    rope_theta: float = 10000.0

    @classmethod
    def from_dict(cls, d: dict[str, Any], text_hidden: int) -> VisionConfig:
        d = dict(d)
        if d.get("hidden_act", "silu") != "silu":
            raise ConfigError(f"vision_config.hidden_act={d['hidden_act']!r}: only 'silu' is supported")
        rope = d.get("rope_parameters") or {}
        if rope.get("rope_type", "axial") != "axial":
            raise ConfigError(f"vision_config.rope_parameters.rope_type={rope['rope_type']!r}: expected 'axial'")
        for key in ("patch_size", "temporal_patch_size"):
            if isinstance(d.get(key), (list, tuple)):
                if len(set(d[key])) != 1:
                    raise ConfigError(f"vision_config.{key}={d[key]!r}: only square patches are supported")
                d[key] = d[key][0]
        names = {f for f in cls.__dataclass_fields__ if f != "rope_theta"}
        cfg = cls(**{k: v for k, v in d.items() if k in names}, rope_theta=float(rope.get("rope_theta", 10000.0)))
        if cfg.hidden_size % cfg.num_heads or (cfg.hidden_size // cfg.num_heads) % 4:
            raise ConfigError(f"vision_config.hidden_size={cfg.hidden_size}: expected num_heads x a multiple of 4")
        if cfg.out_hidden_size != text_hidden:
            raise ConfigError(f"vision_config.out_hidden_size={cfg.out_hidden_size}: must equal the text "
                              f"hidden_size={text_hidden} (image embeddings replace token embeddings)")
        return cfg


class VisionAttention(nn.Module):
    def __init__(self, cfg: VisionConfig):
        super().__init__()
        self.heads, self.head_dim = cfg.num_heads, cfg.hidden_size // cfg.num_heads
        self.qkv = nn.Linear(cfg.hidden_size, 3 * cfg.hidden_size, bias=cfg.attention_bias)
        self.proj = nn.Linear(cfg.hidden_size, cfg.hidden_size, bias=cfg.attention_bias)
        self.q_norm = RMSNorm(self.head_dim, cfg.rms_norm_eps)
        self.k_norm = RMSNorm(self.head_dim, cfg.rms_norm_eps)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, segments: list[int]) -> torch.Tensor:
        n = x.shape[0]
        q, k, v = self.qkv(x).view(n, 3, self.heads, self.head_dim).unbind(1)
        q, k = _rotate(self.q_norm(q), cos, sin), _rotate(self.k_norm(k), cos, sin)
        outs = []
        # NOTE: SDPA, not einsum + softmax: a screenshot is ~10K patches, whose [heads, n, n] score
        # matrix would take GiBs; SDPA's fused kernels (flash / memory-efficient on CUDA, blocked on
        # CPU) never build it. Same values within 2e-7 in fp32.
        for qs, ks, vs in zip(q.split(segments), k.split(segments), v.split(segments)):  # one frame each
            out = F.scaled_dot_product_attention(qs.transpose(0, 1), ks.transpose(0, 1), vs.transpose(0, 1))
            outs.append(out.transpose(0, 1))
        return self.proj(torch.cat(outs).reshape(n, -1))


def _rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    xf = x.float()
    half = xf.shape[-1] // 2
    rotated = torch.cat([-xf[..., half:], xf[..., :half]], dim=-1)
    return (xf * cos.unsqueeze(-2) + rotated * sin.unsqueeze(-2)).to(x.dtype)


class VisionMLP(nn.Module):
    def __init__(self, cfg: VisionConfig):
        super().__init__()
        h, i, bias = cfg.hidden_size, cfg.intermediate_size, cfg.attention_bias
        self.gate_proj, self.up_proj = nn.Linear(h, i, bias=bias), nn.Linear(h, i, bias=bias)
        self.down_proj = nn.Linear(i, h, bias=bias)
        self.limit = cfg.swiglu_limit

    def forward(self, x):
        return self.down_proj(clamped_swiglu(self.gate_proj(x), self.up_proj(x), self.limit))


class VisionBlock(nn.Module):
    def __init__(self, cfg: VisionConfig):
        super().__init__()
        self.norm1, self.norm2 = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps), RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.attn, self.mlp = VisionAttention(cfg), VisionMLP(cfg)

    def forward(self, x, cos, sin, segments):
        x = x + self.attn(self.norm1(x), cos, sin, segments)
        return x + self.mlp(self.norm2(x))


class PatchEmbed(nn.Module):
    def __init__(self, cfg: VisionConfig):
        super().__init__()
        self.cfg = cfg
        kernel = (cfg.temporal_patch_size, cfg.patch_size, cfg.patch_size)
        self.proj = nn.Conv3d(cfg.in_channels, cfg.hidden_size, kernel_size=kernel, stride=kernel)

    def forward(self, pixels: torch.Tensor) -> torch.Tensor:
        c = self.cfg
        x = pixels.view(-1, c.in_channels, c.temporal_patch_size, c.patch_size, c.patch_size)
        return self.proj(x.to(self.proj.weight.dtype)).view(-1, c.hidden_size)


class Merger(nn.Module):
    def __init__(self, cfg: VisionConfig):
        super().__init__()
        d, ctx = cfg.out_hidden_size, cfg.projection_intermediate_size
        self.proj = nn.Linear(d, d, bias=False)
        self.post_projection_norm = nn.LayerNorm(d)
        self.gate_proj, self.up_proj = nn.Linear(d, ctx, bias=False), nn.Linear(d, ctx, bias=False)
        self.down_proj = nn.Linear(ctx, d, bias=False)
        self.limit = cfg.swiglu_limit

    def forward(self, x):
        x = F.gelu(self.post_projection_norm(self.proj(x)))
        return self.down_proj(clamped_swiglu(self.gate_proj(x), self.up_proj(x), self.limit))


class VisionTower(nn.Module):
    def __init__(self, cfg: VisionConfig):
        super().__init__()
        self.cfg = cfg
        self.patch_embed = PatchEmbed(cfg)
        self.blocks = nn.ModuleList(VisionBlock(cfg) for _ in range(cfg.depth))
        self.post_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        m = cfg.spatial_merge_size
        self.downsample = nn.Conv2d(cfg.hidden_size, cfg.out_hidden_size, kernel_size=m, stride=m)
        self.merger = Merger(cfg)

    def _rope(self, grid_thw: torch.Tensor, device) -> tuple[torch.Tensor, torch.Tensor]:
        """Axial 2D RoPE: (h, w) patch coordinates laid out block-major over merge blocks."""
        m = self.cfg.spatial_merge_size
        pos = []
        for t, h, w in grid_thw.tolist():
            hh, ww = torch.meshgrid(torch.arange(h, device=device), torch.arange(w, device=device), indexing="ij")
            shape = (h // m, m, w // m, m)
            hw = torch.stack([hh.reshape(shape).transpose(1, 2).flatten(), ww.reshape(shape).transpose(1, 2).flatten()], -1)
            pos.append(hw.repeat(t, 1))
        pos = torch.cat(pos).float()  # [N, 2]
        spatial = (self.cfg.hidden_size // self.cfg.num_heads) // 2
        inv_freq = 1.0 / (self.cfg.rope_theta ** (torch.arange(0, spatial, 2, dtype=torch.float, device=device) / spatial))
        freqs = pos[..., None] * inv_freq  # [N, 2, spatial / 2]
        hw = torch.cat([freqs[:, 0], freqs[:, 1]], dim=-1)
        angles = torch.cat([hw, hw], dim=-1)  # [N, head_dim]
        return angles.cos(), angles.sin()

    def forward(self, pixel_values: torch.Tensor, grid_thw: torch.Tensor) -> torch.Tensor:
        """pixel_values [N_patches, C*T*P*P], grid_thw [n, 3] -> embeddings [N_patches / merge^2, out_hidden]."""
        m = self.cfg.spatial_merge_size
        if (grid_thw[:, 1:] % m).any():
            raise ValueError(f"grid_thw={grid_thw.tolist()}: h and w must be multiples of spatial_merge_size={m}")
        if int(grid_thw.prod(-1).sum()) != pixel_values.shape[0]:
            raise ValueError(f"pixel_values: {pixel_values.shape[0]} patches, grid_thw={grid_thw.tolist()} says "
                             f"{int(grid_thw.prod(-1).sum())}")
        x = self.patch_embed(pixel_values)
        cos, sin = self._rope(grid_thw, x.device)
        segments = [h * w for t, h, w in grid_thw.tolist() for _ in range(t)]
        for block in self.blocks:
            x = block(x, cos, sin, segments)
        x = self.post_layernorm(x).view(-1, m, m, x.shape[-1]).permute(0, 3, 1, 2)
        x = self.downsample(x).view(-1, self.cfg.out_hidden_size)
        return self.merger(x)
