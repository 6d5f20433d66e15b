"""The shard rules: every tensor of a checkpoint gets one, the shards reassemble the whole, the
replicated set is the reference engines', and a layout that cannot split fails naming the size."""

from __future__ import annotations

import functools
import re

import pytest
import torch

from inference.config import ModelConfig
from inference.parallel import ParallelConfigError, ParallelState, Shard, owns_expert, shard_for, validate_layout
from inference.random_checkpoint import preset_config, random_tensors

REPLICATED = re.compile(
    r"(q_a_proj|kv_a_proj_with_mqa|layernorm|indexer\.|mlp\.gate\.|eh_proj|enorm|hnorm|shared_head\.norm|^model\.norm)"
)


@functools.lru_cache(maxsize=None)
def _tensors(preset: str) -> dict[str, torch.Tensor]:
    return random_tensors(_config(preset), seed=0, dtype=torch.float32)


def _config(preset: str) -> ModelConfig:
    raw = preset_config(preset)
    raw.setdefault("num_key_value_heads", raw["num_attention_heads"])
    return ModelConfig.from_dict(raw)


@pytest.mark.parametrize("preset", ["tiny", "small"])
@pytest.mark.parametrize("tp,ep", [(2, 2), (2, 1), (4, 2)])
def test_shards_reassemble_every_tensor(preset, tp, ep):
    config = _config(preset)
    tensors = _tensors(preset)
    states = [ParallelState(tp, r, ep) for r in range(tp)]
    for name, full in tensors.items():
        specs = [shard_for(name, config, s) for s in states]
        if specs[0].replicated:
            assert REPLICATED.search(name), f"{name} is replicated but not in the reference engines' list"
            continue
        assert not REPLICATED.search(name), f"{name} must stay replicated"
        expert = re.search(r"experts\.(\d+)\.", name)
        holders = [s for s, st in zip(specs, states) if expert is None or owns_expert(int(expert.group(1)), config, st)]
        parts = [s.read(full, tuple(full.shape)) for s in holders]
        dim = holders[0].dim
        whole = torch.cat(parts, dim=dim).narrow(dim, 0, full.shape[dim])
        assert torch.equal(whole, full), name
        assert len(holders) == (tp // ep if expert else tp)


EXTRAS = re.compile(r"^(model\.embed_tokens\.weight|lm_head\.weight)$"
                    r"|\.mlp\.(shared_experts\.)?(gate|up|down)_proj\.weight$")


@pytest.mark.parametrize("split_extras", [True, False])
def test_dp_attention_splits_experts_and_only_the_extras_it_is_asked_to(split_extras):
    """DP attention: attention whole on every rank; embed/head by vocab and the dense and shared MLPs
    by intermediate size when the extras are split (reassembling the whole), else replicated."""
    config, tensors = _config("tiny"), _tensors("tiny")
    states = [ParallelState(2, r, 2, attention_dp=True, split_extras=split_extras) for r in range(2)]
    extras = 0
    for name, full in tensors.items():
        if ".experts." in name:
            continue  # split as under TP (test above)
        specs = [shard_for(name, config, s) for s in states]
        if not (split_extras and EXTRAS.search(name)):
            assert all(s.replicated for s in specs), name
            continue
        extras += 1
        dim = specs[0].dim
        whole = torch.cat([s.read(full, tuple(full.shape)) for s in specs], dim=dim).narrow(dim, 0, full.shape[dim])
        assert torch.equal(whole, full), name
    moe_layers = config.num_hidden_layers + config.num_mtp_layers - config.first_k_dense_replace
    assert extras == (2 + 3 * config.first_k_dense_replace + 3 * moe_layers if split_extras else 0)


def test_each_expert_has_one_ep_group():
    config = _config("tiny")
    states = [ParallelState(4, r, 2) for r in range(4)]
    for e in range(config.n_routed_experts):
        groups = {s.ep_rank for s in states if owns_expert(e, config, s)}
        assert len(groups) == 1


def test_vocab_padding_reads_zeros():
    spec = Shard(0, 6, 4)
    full = torch.arange(8.0).view(8, 1)
    assert spec.read(full, (8, 1)).flatten().tolist() == [6.0, 7.0, 0.0, 0.0]


def test_scale_blocks_follow_the_shard_or_refuse():
    assert Shard(0, 256, 256).in_blocks(128, 1024) == Shard(0, 2, 2)
    assert Shard(0, 256, 320).in_blocks(128, 576) == Shard(0, 2, 3)  # the partial last block
    assert Shard(0, 64, 64).in_blocks(128, 1024) is None  # cuts a block


@pytest.mark.parametrize("overrides,tp,message", [
    ({}, 3, "num_attention_heads = 4 is not divisible by the parallel size 3"),
    ({"num_attention_heads": 8, "intermediate_size": 100}, 8, "intermediate_size = 100 is not divisible by the parallel size 8"),
    ({"n_routed_experts": 6}, 4, "n_routed_experts = 6 is not divisible by the parallel size 4"),
])
def test_bad_layout_names_the_size(overrides, tp, message):
    raw = {**preset_config("tiny"), "num_key_value_heads": 4, **overrides}
    if "num_attention_heads" in overrides:
        raw["num_key_value_heads"] = overrides["num_attention_heads"]
    if "n_routed_experts" in overrides:
        raw["n_group"] = 1
        raw["topk_group"] = 1
    with pytest.raises(ParallelConfigError, match=re.escape(message)):
        validate_layout(ModelConfig.from_dict(raw), ParallelState(tp, 0, tp))
