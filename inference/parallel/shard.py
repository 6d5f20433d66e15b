"""Which slice of each checkpoint tensor a rank holds: every sharding rule of the model, in one place.

`shard_for(name, config, state)` maps a checkpoint tensor name (real on-disk names, per-expert
tensors included) to a `Shard`: replicated, or a contiguous range of rows (dim 0) or columns
(dim 1). The layers allocate their local shapes from the same `ParallelState` helpers, and the
loader checks that the two agree, so a rule here and a layer's shape can never drift apart
silently. The rules follow DeepSeek-V3's convert.py and vLLM (../shared/docs/scaleout.md §1, §4.4):

  embed_tokens / lm_head            rows, by vocab (padded to a multiple of the extras' ranks)
  q_b_proj, kv_b_proj               rows, by attention head
  o_proj                            cols, by attention head
  dense and shared-expert MLP       gate/up rows, down cols, by intermediate size over the
                                    extras' ranks
  routed experts                    whole experts per ep group (`owns_expert`), and inside the
                                    group gate/up rows, down cols, by intermediate over tp // ep
  everything else                   replicated: q_a, kv_a, norms, the whole DSA indexer, the
                                    router and its bias, eh_proj, enorm/hnorm, model.norm

Under DP attention the attention projections are replicated (every head on every rank), and the
"extras" (vocab, dense and shared MLPs) follow `ParallelState.extras_tp`: split over all ranks as
above (the default), or replicated.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

import torch

from inference.config import ModelConfig
from inference.parallel.state import ParallelState

_ATTN = re.compile(r"\.self_attn\.(q_b_proj|kv_b_proj|o_proj)\.weight$")
_MLP = re.compile(r"^model\.layers\.(\d+)\.mlp\.(shared_experts\.)?(gate_proj|up_proj|down_proj)\.weight$")
_EXPERT = re.compile(r"^model\.layers\.(\d+)\.mlp\.experts\.(\d+)\.(gate_proj|up_proj|down_proj)\.weight$")
_VOCAB = re.compile(r"^(model\.embed_tokens\.weight|lm_head\.weight)$")


@dataclass(frozen=True)
class Shard:
    """dim None: the whole tensor. Otherwise [start, start + size) along dim; a range past the
    tensor's end (the vocab padding of the last rank) reads as zeros."""

    dim: int | None = None
    start: int = 0
    size: int = 0

    @property
    def replicated(self) -> bool:
        return self.dim is None

    def local_shape(self, full: tuple[int, ...]) -> tuple[int, ...]:
        if self.dim is None:
            return tuple(full)
        shape = list(full)
        shape[self.dim] = self.size
        return tuple(shape)

    def read(self, tensor_slice, full: tuple[int, ...]) -> torch.Tensor:
        """Read only this shard from a safetensors slice (or a tensor): never the whole tensor."""
        if self.dim is None:
            return tensor_slice[:]
        end = min(self.start + self.size, full[self.dim])
        index = [slice(None)] * len(full)
        index[self.dim] = slice(self.start, end)
        part = tensor_slice[tuple(index)]
        if end - self.start == self.size:
            return part
        padded = torch.zeros(self.local_shape(full), dtype=part.dtype)
        padded.narrow(self.dim, 0, part.shape[self.dim]).copy_(part)
        return padded

    def in_blocks(self, block: int, full: int) -> "Shard | None":
        """The matching shard of a block-scale tensor, or None when this shard cuts a block
        (its start, or an end before the tensor's end, is not a multiple of `block`)."""
        if self.dim is None:
            return self
        end = min(self.start + self.size, full)
        if self.start % block or (end % block and end != full):
            return None
        return Shard(self.dim, self.start // block, math.ceil(self.size / block))


REPLICATED = Shard()


def _rows(start_size: tuple[int, int], unit: int = 1) -> Shard:
    return Shard(0, start_size[0] * unit, start_size[1] * unit)


def _cols(start_size: tuple[int, int], unit: int = 1) -> Shard:
    return Shard(1, start_size[0] * unit, start_size[1] * unit)


def shard_for(name: str, config: ModelConfig, state: ParallelState) -> Shard:
    """This rank's slice of checkpoint tensor `name` (a `.weight`; scales use `Shard.in_blocks`)."""
    if state.world == 1:
        return REPLICATED
    if _VOCAB.match(name):
        return _rows(state.vocab(config.vocab_size)) if state.extras_tp > 1 else REPLICATED
    m = _ATTN.search(name)
    if m and name.startswith("model.layers.") and state.tp > 1:
        heads = state.heads(config.num_attention_heads)
        kind = m.group(1)
        if kind == "q_b_proj":
            return _rows(heads, config.qk_head_dim)
        if kind == "kv_b_proj":
            return _rows(heads, config.qk_nope_head_dim + config.v_head_dim)
        return _cols(heads, config.v_head_dim)
    m = _EXPERT.match(name)
    if m:
        part = state.expert_intermediate(config.moe_intermediate_size)
        return _cols(part) if m.group(3) == "down_proj" else _rows(part)
    m = _MLP.match(name)
    if m and state.extras_tp > 1:
        shared = m.group(2) is not None
        inter = config.moe_intermediate_size * config.n_shared_experts if shared else config.intermediate_size
        part = state.split(inter, "moe_intermediate_size * n_shared_experts" if shared else "intermediate_size")
        return _cols(part) if m.group(3) == "down_proj" else _rows(part)
    return REPLICATED


def owns_expert(expert: int, config: ModelConfig, state: ParallelState) -> bool:
    start, size = state.experts(config.n_routed_experts)
    return start <= expert < start + size


def validate_layout(config: ModelConfig, state: ParallelState) -> None:
    """Fail before anything is loaded when the layout cannot split this model's shapes."""
    if state.world == 1:
        return
    state.heads(config.num_attention_heads)
    state.split(config.intermediate_size, "intermediate_size")
    if config.n_routed_experts:
        state.experts(config.n_routed_experts)
        state.expert_intermediate(config.moe_intermediate_size)
        state.split(config.moe_intermediate_size * config.n_shared_experts, "moe_intermediate_size * n_shared_experts")


def fp8_block_misalignments(config: ModelConfig, state: ParallelState, block: tuple[int, int]) -> list[str]:
    """Every sharded FP8 weight whose shard would cut a scale block (FP8-resident weights cannot
    be sliced inside a block; vLLM's validate_fp8_block_shape is the same rule). [] = aligned."""
    if state.world == 1:
        return []
    h, r = config.hidden_size, config.kv_lora_rank
    shapes = {  # representative checkpoint names -> full [out, in]
        "model.layers.L.self_attn.q_b_proj.weight": (config.num_attention_heads * config.qk_head_dim, config.q_lora_rank),
        "model.layers.L.self_attn.kv_b_proj.weight": (config.num_attention_heads * (config.qk_nope_head_dim + config.v_head_dim), r),
        "model.layers.L.self_attn.o_proj.weight": (h, config.num_attention_heads * config.v_head_dim),
        "model.layers.0.mlp.gate_proj.weight": (config.intermediate_size, h),
        "model.layers.0.mlp.down_proj.weight": (h, config.intermediate_size),
    }
    if config.n_routed_experts:
        shared = config.moe_intermediate_size * config.n_shared_experts
        shapes["model.layers.L.mlp.shared_experts.gate_proj.weight"] = (shared, h)
        shapes["model.layers.L.mlp.shared_experts.down_proj.weight"] = (h, shared)
        shapes["model.layers.L.mlp.experts.0.gate_proj.weight"] = (config.moe_intermediate_size, h)
        shapes["model.layers.L.mlp.experts.0.down_proj.weight"] = (h, config.moe_intermediate_size)
    problems = []
    for name, full in shapes.items():
        shard = shard_for(name.replace(".L.", f".{max(config.first_k_dense_replace, 0)}."), config, state)
        if shard.replicated:
            continue
        if shard.in_blocks(block[shard.dim], full[shard.dim]) is None:
            problems.append(f"{name.replace('.L.', '.*.')}: rank {state.rank}'s {'rows' if shard.dim == 0 else 'columns'} "
                            f"[{shard.start}, {shard.start + shard.size}) cut its {block[0]}x{block[1]} FP8 scale blocks")
    return problems
