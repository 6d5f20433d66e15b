"""Vocab-parallel embedding and LM head (DeepSeek-V3's ParallelEmbedding / nano-vllm's ParallelLMHead).

Each rank holds rows [v0, v0 + V/tp) of a vocab padded up to a multiple of tp. The embedding
looks up the ids it owns, zeroes the others and all-reduces; the head computes its slice of the
logits and gathers them to the leader, which drops the padding. Followers get None logits: only
the leader samples.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from inference.parallel.state import ParallelState


class VocabParallelEmbedding(nn.Module):
    def __init__(self, vocab_size: int, hidden_size: int, parallel: ParallelState):
        super().__init__()
        self.parallel = parallel
        self.v0, per = parallel.vocab(vocab_size)
        self.weight = nn.Parameter(torch.empty(per, hidden_size))

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        local = ids - self.v0
        outside = (local < 0) | (local >= self.weight.shape[0])
        h = F.embedding(local.masked_fill(outside, 0), self.weight)
        h = h.masked_fill(outside.unsqueeze(-1), 0)
        return self.parallel.comm.all_reduce(h)


class ParallelLMHead(nn.Module):
    def __init__(self, hidden_size: int, vocab_size: int, parallel: ParallelState):
        super().__init__()
        self.parallel = parallel
        self.vocab_size = vocab_size
        _, per = parallel.vocab(vocab_size)
        self.weight = nn.Parameter(torch.empty(per, hidden_size))

    def forward(self, x: torch.Tensor) -> torch.Tensor | None:
        logits = self.parallel.comm.gather_to_leader(F.linear(x, self.weight), dim=-1)
        return None if logits is None else logits[..., : self.vocab_size]
