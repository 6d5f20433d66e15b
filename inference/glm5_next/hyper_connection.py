"""Manifold-constrained hyper-connections (mHC): hc_mult residual streams instead of one.

Per block, the flattened streams [N * D] (unweighted RMS-normalized) are projected to N "pre"
weights (sigmoid + eps: collapse the streams into the block input), N "post" weights
(2 * sigmoid: expand the block output back onto the streams) and an N x N "comb" matrix (softmax,
then Sinkhorn-normalized to doubly stochastic: how the old streams mix into the new ones).
new_streams = post * block(collapse(streams)) + comb^T @ streams. All in fp32 as transformers does.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from inference.glm5_next.config import Glm5NextTextConfig


class HyperConnection(nn.Module):
    def __init__(self, config: Glm5NextTextConfig):
        super().__init__()
        self.n, self.iters, self.eps = config.hc_mult, config.hc_sinkhorn_iters, config.hc_eps
        self.norm_eps = config.rms_norm_eps
        width = (2 + self.n) * self.n
        self.fn = nn.Parameter(torch.zeros(width, self.n * config.hidden_size))
        self.base = nn.Parameter(torch.zeros(width, dtype=torch.float32))
        self.scale = nn.Parameter(torch.ones(3, dtype=torch.float32))

    def forward(self, streams: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """streams [B, T, N, D] -> (post [B, T, N], comb [B, T, N, N], block input [B, T, D])."""
        n = self.n
        flat = streams.reshape(*streams.shape[:2], -1).float()
        flat = flat * torch.rsqrt(flat.square().mean(-1, keepdim=True) + self.norm_eps)
        mix = F.linear(flat, self.fn.float())
        pre_w, post_w, comb_w = mix.split([n, n, n * n], dim=-1)
        pre_b, post_b, comb_b = self.base.split([n, n, n * n])
        pre_s, post_s, comb_s = self.scale.unbind(0)
        pre = torch.sigmoid(pre_w * pre_s + pre_b) + self.eps
        post = 2 * torch.sigmoid(post_w * post_s + post_b)
        comb = torch.softmax(comb_w.view(*comb_w.shape[:-1], n, n) * comb_s + comb_b.view(n, n), dim=-1) + self.eps
        comb = comb / (comb.sum(dim=-2, keepdim=True) + self.eps)
        for _ in range(self.iters - 1):  # Sinkhorn: alternate row / column normalization
            comb = comb / (comb.sum(dim=-1, keepdim=True) + self.eps)
            comb = comb / (comb.sum(dim=-2, keepdim=True) + self.eps)
        collapsed = (pre.unsqueeze(-1) * streams).sum(dim=2).to(streams.dtype)
        return post, comb, collapsed

    @staticmethod
    def merge(post: torch.Tensor, comb: torch.Tensor, out: torch.Tensor, residual: torch.Tensor) -> torch.Tensor:
        dtype = residual.dtype
        return post.to(dtype).unsqueeze(-1) * out.unsqueeze(-2) + torch.matmul(comb.to(dtype).transpose(-1, -2), residual)
