"""One pre-norm decoder block: h + Attn(norm(h)), then + FFN(norm(.)), FFN dense or MoE."""

from __future__ import annotations

import torch
from torch import nn

from inference.config import ModelConfig
from inference.forward_batch import AttentionMetadata
from inference.layers.indexer import TopkSelection
from inference.layers.mla import MLAttention
from inference.layers.mlp import SwiGLU
from inference.layers.moe import MoE
from inference.layers.norm import RMSNorm
from inference.layers.rope import RopeTables


class DecoderLayer(nn.Module):
    def __init__(self, config: ModelConfig, layer: int):
        super().__init__()
        self.layer = layer
        self.input_layernorm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.self_attn = MLAttention(config, has_indexer=config.is_full_indexer(layer))
        self.post_attention_layernorm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.mlp = MoE(config) if config.is_moe(layer) else SwiGLU(config.hidden_size, config.intermediate_size)

    def forward(
        self,
        h: torch.Tensor,
        rope: RopeTables,
        meta: AttentionMetadata,
        latent_cache: torch.Tensor,
        indexer_cache: torch.Tensor | None,
        shared_selection: TopkSelection | torch.Tensor | None,
        mode: str = "auto",
        kernels: str | None = None,
        reuse_selection: bool = False,
    ) -> tuple[torch.Tensor, TopkSelection | torch.Tensor | None]:
        attn, selection = self.self_attn(
            self.input_layernorm(h), rope, meta, latent_cache, indexer_cache, shared_selection, mode, kernels,
            reuse_selection,
        )
        h = h + attn
        x = self.post_attention_layernorm(h)
        return h + (self.mlp(x, kernels) if isinstance(self.mlp, MoE) else self.mlp(x)), selection
