"""One pre-norm decoder block: h + Attn(norm(h)), then + FFN(norm(.)), FFN dense or MoE.

Under tensor/expert parallelism attention and the FFN return this rank's partial sums; the two
named reduce points below make them whole again (one all-reduce each, as DeepSeek's reference).
NOTE: after each reduce the hidden state is bit-identical on every rank, which is what keeps the
replicated modules (q_a/kv_a, the indexer, the router) choosing the same keys and experts."""

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
from inference.parallel.comm import SingleComm
from inference.parallel.dp_extras import DPDenseMLP
from inference.parallel.partial_sums import accumulate_dtype, all_reduce_partial
from inference.parallel.state import ParallelState


class DecoderLayer(nn.Module):
    def __init__(self, config: ModelConfig, layer: int, parallel: ParallelState | None = None):
        super().__init__()
        parallel = parallel or ParallelState.single()
        self.layer = layer
        # Partial sums only under tensor parallelism; under DP attention the MoE (and a split dense
        # MLP) exchanges its tokens itself and returns whole sums.
        self.comm = parallel.comm if parallel.tp > 1 else SingleComm()
        self.reduce_fp32 = parallel.reduce_fp32
        self.input_layernorm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.self_attn = MLAttention(config, config.is_full_indexer(layer), parallel)
        self.post_attention_layernorm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        if config.is_moe(layer):
            self.mlp = MoE(config, parallel)
        else:
            inter = parallel.split(config.intermediate_size, "intermediate_size")[1]
            if parallel.dp_split_extras:  # DP attention: exchanges every rank's rows itself
                self.mlp = DPDenseMLP(config.hidden_size, inter, parallel)
            else:
                self.mlp = SwiGLU(config.hidden_size, inter)

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
        h = h + self.reduce_attn(attn, h.dtype)
        x = self.post_attention_layernorm(h)
        if isinstance(self.mlp, MoE):
            ffn = self.mlp(x, kernels)
        else:
            ffn = self.mlp(x, accumulate_dtype(self.comm.world, self.reduce_fp32, x.dtype))
        return h + self.reduce_mlp(ffn, h.dtype), selection

    # The two reduce points (DP-attention turns the second into a reduce-scatter and drops the first).
    # Each returns the whole sum in the hidden state's dtype (the MoE's partial may be fp32).
    def reduce_attn(self, partial: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
        return all_reduce_partial(self.comm, partial, dtype, self.reduce_fp32)

    def reduce_mlp(self, partial: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
        return all_reduce_partial(self.comm, partial, dtype, self.reduce_fp32)
