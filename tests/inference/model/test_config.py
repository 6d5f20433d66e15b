"""ModelConfig: derivations agree with transformers' GlmMoeDsaConfig; bad configs name the field."""

from __future__ import annotations

import pytest
import torch

from inference.config import ConfigError, ModelConfig
from inference.kv_cache import PagedKVCache, kv_bytes_per_token

GLM52 = dict(
    model_type="glm_moe_dsa", num_hidden_layers=78, index_topk_freq=4, index_skip_topk_offset=3,
    rope_parameters={"rope_theta": 8e6, "rope_type": "default"}, head_dim=192,
    eos_token_id=[154820, 154827, 154829], pad_token_id=154820, num_nextn_predict_layers=1,
)  # fmt: skip


def test_glm52_schedule_and_derived_values():
    cfg = ModelConfig.from_dict(GLM52)
    full = [i for i, t in enumerate(cfg.indexer_types) if t == "full"]
    assert full == [0, 1, 2] + list(range(6, 78, 4)) and len(full) == 21
    assert cfg.qk_head_dim == 256 and cfg.softmax_scale == 0.0625  # head_dim=192 in the file is ignored
    assert cfg.mlp_layer_types == ("dense",) * 3 + ("sparse",) * 75
    assert cfg.rope_theta == 8e6 and cfg.eos_token_id == (154820, 154827, 154829)
    assert cfg.indexer_layers[-1] == 78  # the MTP layer always has a full indexer
    # docs/glm5-model.md §D: bf16 MLA + bf16 indexer x21 = 95,232 B/token, MTP adds 1,408 B.
    assert kv_bytes_per_token(cfg, torch.bfloat16) == 95_232 + 1_408


@pytest.mark.parametrize(
    "extra",
    [
        dict(),
        dict(index_topk_freq=4, index_skip_topk_offset=3),
        dict(index_topk_freq=4),  # transformers' default offset 2
        dict(index_topk_freq=3, index_skip_topk_offset=1),
        dict(index_topk_pattern="FFSSFSFSSS"),
        dict(indexer_types=["full", "shared"] * 5),
        dict(first_k_dense_replace=0),
        dict(mlp_layer_types=["dense", "sparse"] * 5),
    ],
)
def test_derivations_match_transformers(extra):
    from transformers import GlmMoeDsaConfig

    raw = dict(model_type="glm_moe_dsa", num_hidden_layers=10, rope_parameters={"rope_theta": 1e6, "rope_type": "default"}, **extra)
    ours = ModelConfig.from_dict(raw)
    hf = GlmMoeDsaConfig(**{k: v for k, v in raw.items() if k != "model_type"})
    assert list(ours.indexer_types) == hf.indexer_types
    assert list(ours.mlp_layer_types) == hf.mlp_layer_types
    assert ours.qk_head_dim == hf.qk_head_dim


def test_round_trip_through_to_dict():
    cfg = ModelConfig.from_dict({**GLM52, "quantization_config": {"quant_method": "fp8", "weight_block_size": [128, 128]}})
    again = ModelConfig.from_dict(cfg.to_dict())
    assert again == cfg and again.weight_block_size == (128, 128)


@pytest.mark.parametrize(
    "edit, field",
    [
        (dict(model_type="deepseek_v32"), "model_type"),
        (dict(rope_parameters=None), "rope_theta"),
        (dict(rope_parameters={"rope_theta": 1e6, "rope_type": "yarn"}), "rope_type"),
        (dict(hidden_size="6144"), "hidden_size"),
        (dict(n_group=3), "n_group"),
        (dict(n_group=8, topk_group=9), "topk_group"),
        (dict(num_experts_per_tok=64, n_group=8, topk_group=1), "num_experts_per_tok"),
        (dict(indexer_types=["full"] * 5), "indexer_types"),
        (dict(index_topk_pattern="FSX" * 26), "index_topk_pattern"),
        (dict(index_topk_pattern="S" + "F" * 77), "indexer_types[0]"),
        (dict(mlp_layer_types=["dense", "moe"] * 39), "mlp_layer_types"),
        (dict(index_head_dim=32), "index_head_dim"),
        (dict(hidden_act="gelu"), "hidden_act"),
        (dict(num_nextn_predict_layers=3), "num_nextn_predict_layers"),
        (dict(quantization_config={"quant_method": "awq"}), "quant_method"),
        (dict(scoring_func="softmax"), "scoring_func"),
        (dict(attention_bias=True), "attention_bias"),
    ],
)
def test_bad_configs_name_the_field(edit, field):
    raw = {**GLM52, **edit}
    if edit.get("rope_parameters", "keep") is None:
        raw.pop("rope_parameters")
    with pytest.raises(ConfigError, match=field.replace("[", r"\[").replace("]", r"\]")):
        ModelConfig.from_dict(raw)


def test_missing_config_file(tmp_path):
    with pytest.raises(ConfigError, match="no config.json"):
        ModelConfig.from_pretrained(tmp_path)


def test_cache_allocates_indexer_keys_only_on_full_layers():
    cfg = ModelConfig.from_dict({**GLM52, "num_hidden_layers": 8, "hidden_size": 64, "kv_lora_rank": 16,
                                 "qk_rope_head_dim": 8, "index_head_dim": 16})  # fmt: skip
    cache = PagedKVCache(cfg, num_pages=3, page_size=4, dtype=torch.float32)
    assert sorted(cache.indexer) == [0, 1, 2, 6, 8]  # full layers + MTP layer 8
    assert len(cache.latent) == 9 and cache.latent[0].shape == (3, 4, 24)
    assert cache.bytes_per_token() == (24 * 9 + 16 * 5) * 4
    with pytest.raises(ValueError, match="page ids"):
        cache.read_pages(torch.tensor([3]))
