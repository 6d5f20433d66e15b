"""The MTP ("nextn") draft layer, stored as decoder layer index num_hidden_layers.

For a token at position p with target hidden state h_p (after model.norm) and the next token
t_{p+1}: u = eh_proj([enorm(embed(t_{p+1})) ; hnorm(h_p)]) (embedding half first), z = block(u)
at position p with its own latent + indexer cache, logits = lm_head(shared_head.norm(z)).
embed_tokens and lm_head are the target's. vLLM additionally zeroes the embedding at position 0;
the spec formula (and SGLang) do not, and neither do we.
"""

from __future__ import annotations

import torch
from torch import nn

from inference.config import ModelConfig
from inference.layers.decoder import DecoderLayer
from inference.layers.norm import RMSNorm
from inference.parallel.state import ParallelState


class SharedHead(nn.Module):
    def __init__(self, config: ModelConfig):
        super().__init__()
        self.norm = RMSNorm(config.hidden_size, config.rms_norm_eps)


class MTPLayer(DecoderLayer):
    def __init__(self, config: ModelConfig, layer: int, parallel: ParallelState | None = None):
        super().__init__(config, layer, parallel)  # the block is sharded like a target layer; eh_proj replicated
        h = config.hidden_size
        self.enorm = RMSNorm(h, config.rms_norm_eps)
        self.hnorm = RMSNorm(h, config.rms_norm_eps)
        self.eh_proj = nn.Linear(2 * h, h, bias=False)
        self.shared_head = SharedHead(config)

    def combine(self, embeds: torch.Tensor, prev_hidden: torch.Tensor) -> torch.Tensor:
        return self.eh_proj(torch.cat([self.enorm(embeds), self.hnorm(prev_hidden)], dim=-1))
