"""Glm5NextTextConfig: transformers' derived defaults, refusals naming the field; the flash-tiny
random checkpoint in the release layout (transformers loads it to the same logits); FP8 blocks."""

from __future__ import annotations

import json

import pytest
import torch

from inference.config import ConfigError
from inference.glm5_next.config import Glm5NextTextConfig
from inference.glm5_next.loader import CheckpointError, load_flash_model
from inference.glm5_next.random_checkpoint import flash_text_config, write_flash_checkpoint
from inference.fp8 import dequantize_blockwise


def test_defaults_match_transformers():
    from transformers import Glm5NextTextConfig as HFConfig

    hf = HFConfig()
    ours = Glm5NextTextConfig.from_dict({"model_type": "glm5_next_text"})
    assert list(ours.layer_types) == hf.layer_types
    assert list(ours.mlp_layer_types) == hf.mlp_layer_types
    assert list(ours.indexer_types) == hf.indexer_types
    assert [i for i, t in enumerate(ours.layer_types) if t == "indexed_attention"] == list(range(3, 45, 4))
    for name in ("hc_mult", "index_kpool", "index_topk", "index_n_heads", "linear_lower_bound", "swiglu_limit",
                 "n_routed_experts", "linear_num_heads", "linear_head_dim", "qk_nope_head_dim", "v_head_dim"):
        assert getattr(ours, name) == getattr(hf, name), name


def test_every_transformers_field_is_modelled_or_declared_neutral():
    from dataclasses import fields

    from transformers import Glm5NextTextConfig as HFConfig

    from inference.glm5_next.config import INFERENCE_NEUTRAL

    ours = {f.name for f in fields(Glm5NextTextConfig)}
    assert set(HFConfig.__annotations__) - ours - INFERENCE_NEUTRAL == set()


def test_multimodal_config_and_linear_attn_alias():
    raw = {"model_type": "glm5_next", "vision_config": {"depth": 2},
           "text_config": {"model_type": "glm5_next_text", "num_hidden_layers": 4,
                           "linear_attn_config": {"head_dim": 32, "num_heads": 2, "short_conv_kernel_size": 3}}}
    cfg = Glm5NextTextConfig.from_dict(raw)
    assert (cfg.linear_head_dim, cfg.linear_num_heads, cfg.linear_conv_kernel_dim) == (32, 2, 3)
    assert cfg.vision_config == {"depth": 2}


@pytest.mark.parametrize("override, field", [
    ({"qk_rope_head_dim": 64}, "qk_rope_head_dim"),
    ({"index_topk": 10, "index_kpool": 4}, "index_topk"),
    ({"num_key_value_heads": 2}, "num_key_value_heads"),
    ({"hidden_act": "gelu"}, "hidden_act"),
    ({"output_router_logits": True}, "output_router_logits"),
    ({"linear_lower_bound": 1.0}, "linear_lower_bound"),
    ({"layer_types": ["linear_attention"] * 3}, "layer_types"),
    ({"indexer_types": ["full", "full", "full", "shared"] + ["full"] * 4}, "indexer_types[3]"),
    ({"hc_mult": 0}, "hc_mult"),
    ({"index_kpool": 0}, "index_kpool"),
])  # fmt: skip
def test_bad_fields_are_refused_by_name(override, field):
    with pytest.raises(ConfigError, match=field.replace("[", r"\[").replace("]", r"\]")):
        Glm5NextTextConfig.from_dict(flash_text_config("flash-tiny", override))


def test_random_checkpoint_is_the_release_layout_and_transformers_agrees(tmp_path):
    from transformers import Glm5NextForConditionalGeneration

    path = write_flash_checkpoint(tmp_path / "ft", "flash-tiny", seed=1, dtype=torch.float32)
    names = set(json.loads((path / "model.safetensors.index.json").read_text())["weight_map"])
    assert "model.language_model.layers.0.self_attn.q_conv1d.weight" in names
    assert "model.language_model.layers.0.self_attn.f_a_proj.weight" in names
    assert "model.language_model.layers.0.hc_attn_fn" in names
    assert "model.language_model.layers.3.mlp.experts.7.up_proj.weight" in names
    assert "model.language_model.layers.3.self_attn.indexer.index_kpool_compress_ape" in names
    assert "model.visual.patch_embed.proj.weight" in names
    ours = load_flash_model(path)
    assert hasattr(ours.model, "visual")
    assert ours.config.index_n_heads == 32
    hf, info = Glm5NextForConditionalGeneration.from_pretrained(path, dtype=torch.float32, attn_implementation="eager",
                                                                output_loading_info=True)
    assert not info["missing_keys"] and not info["unexpected_keys"]  # every tensor where transformers wants it
    hf.eval()
    ids = torch.randint(3, ours.config.vocab_size, (1, 30), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        ref = hf(ids).logits
    assert ref.abs().max() > 1.0
    assert (ours(ids) - ref).abs().max().item() <= 1e-4


def test_fp8_checkpoint_dequantizes_block_scales(tmp_path):
    path = write_flash_checkpoint(tmp_path / "f8", "flash-tiny", seed=2, fp8=True, fp8_block=(8, 8))
    ours = load_flash_model(path)
    from safetensors import safe_open

    index = json.loads((path / "model.safetensors.index.json").read_text())["weight_map"]
    name = "model.language_model.layers.0.self_attn.q_proj.weight"
    with safe_open(path / index[name], "pt") as f:
        w, s = f.get_tensor(name), f.get_tensor(name + "_scale_inv")
    assert w.dtype == torch.float8_e4m3fn and s.shape == (8, 8)
    assert torch.equal(ours.model.layers[0].self_attn.q_proj.weight, dequantize_blockwise(w, s, (8, 8)))
    ids = torch.randint(3, ours.config.vocab_size, (1, 12), generator=torch.Generator().manual_seed(1))
    assert torch.isfinite(ours(ids)).all()


def test_missing_and_unexpected_tensors_are_named(tmp_path):
    from safetensors.torch import load_file, save_file

    path = write_flash_checkpoint(tmp_path / "bad", "flash-tiny", seed=0, shards=1, dtype=torch.float32)
    file = next(path.glob("*.safetensors"))
    tensors = load_file(file)
    del tensors["model.language_model.layers.1.self_attn.k_conv1d.weight"]
    tensors["model.language_model.layers.2.self_attn.bogus.weight"] = torch.zeros(2)
    save_file(tensors, file)
    index = path / "model.safetensors.index.json"
    data = json.loads(index.read_text())
    data["weight_map"] = {k: file.name for k in tensors}
    index.write_text(json.dumps(data))
    with pytest.raises(CheckpointError) as err:
        load_flash_model(path)
    assert "layers.1.self_attn.conv1d.weight: needs q_conv1d, k_conv1d and v_conv1d" in str(err.value)
    assert "layers.2.self_attn.bogus.weight: unexpected" in str(err.value)
