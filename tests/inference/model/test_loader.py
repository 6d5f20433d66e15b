"""Checkpoint loading: real on-disk names, FP8 blocks, tolerated extras, named errors, memory."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch
from safetensors import safe_open
from safetensors.torch import save_file

from inference.loader import CheckpointError, checkpoint_files, load_model
from inference.random_checkpoint import write_random_checkpoint


def _read_all(path: Path) -> dict[str, torch.Tensor]:
    out = {}
    for name, file in checkpoint_files(path).items():
        with safe_open(file, framework="pt") as f:
            out[name] = f.get_tensor(name)
    return out


def _rewrite(src: Path, dst: Path, tensors: dict[str, torch.Tensor], config_edit=None) -> Path:
    """Copy a checkpoint as one shard with a different tensor set."""
    dst.mkdir()
    config = json.loads((src / "config.json").read_text())
    if config_edit:
        config_edit(config)
    (dst / "config.json").write_text(json.dumps(config))
    save_file({k: v.contiguous() for k, v in tensors.items()}, str(dst / "model.safetensors"))
    return dst


def test_shards_and_per_expert_names_are_packed(tiny_checkpoint):
    index = json.loads((tiny_checkpoint / "model.safetensors.index.json").read_text())
    assert len(set(index["weight_map"].values())) == 2
    assert "model.layers.1.mlp.experts.7.up_proj.weight" in index["weight_map"]
    assert "model.layers.4.eh_proj.weight" in index["weight_map"]  # the MTP layer
    assert "model.layers.2.self_attn.indexer.wk.weight" not in index["weight_map"]  # shared layer
    model = load_model(tiny_checkpoint)
    raw = _read_all(tiny_checkpoint)
    packed = model.model.layers[1].mlp.experts
    inter = model.config.moe_intermediate_size
    for e in (0, 5):
        assert torch.equal(packed.gate_up_proj[e, :inter], raw[f"model.layers.1.mlp.experts.{e}.gate_proj.weight"].float())
        assert torch.equal(packed.gate_up_proj[e, inter:], raw[f"model.layers.1.mlp.experts.{e}.up_proj.weight"].float())
        assert torch.equal(packed.down_proj[e], raw[f"model.layers.1.mlp.experts.{e}.down_proj.weight"].float())
    assert model.model.layers[1].mlp.gate.weight.dtype == torch.float32
    bf16 = load_model(tiny_checkpoint, dtype=torch.bfloat16)
    assert bf16.lm_head.weight.dtype == torch.bfloat16
    assert bf16.model.layers[1].mlp.gate.e_score_correction_bias.dtype == torch.float32


def test_fp8_checkpoint_matches_its_dequantized_reference(tmp_path):
    fp8_dir = write_random_checkpoint(tmp_path / "fp8", preset="tiny", seed=1, fp8=True)
    raw = _read_all(fp8_dir)
    q_b = raw["model.layers.0.self_attn.q_b_proj.weight"]
    assert q_b.dtype == torch.float8_e4m3fn
    assert raw["model.layers.0.self_attn.q_b_proj.weight_scale_inv"].shape == (1, 1)
    for name in ("model.layers.1.mlp.gate.weight", "model.layers.0.self_attn.indexer.weights_proj.weight",
                 "model.layers.4.eh_proj.weight", "lm_head.weight", "model.layers.0.self_attn.indexer.k_norm.bias"):  # fmt: skip
        assert raw[name].dtype != torch.float8_e4m3fn, name
    assert raw["model.layers.1.mlp.experts.3.down_proj.weight"].dtype == torch.float8_e4m3fn

    # Independent dequantization: every 128x128 block times its scale (kron expands the blocks).
    dequant = {}
    for name, t in raw.items():
        if name.endswith("_scale_inv"):
            continue
        scale = raw.get(name + "_scale_inv")
        if scale is None:
            dequant[name] = t
        else:
            full = torch.kron(scale, torch.ones(128, 128))[: t.shape[0], : t.shape[1]]
            dequant[name] = t.float() * full
    ref_dir = _rewrite(fp8_dir, tmp_path / "ref", dequant, lambda c: c.pop("quantization_config"))
    ids = torch.randint(0, 512, (2, 20), generator=torch.Generator().manual_seed(0))
    fp8_logits = load_model(fp8_dir)(ids)
    assert (fp8_logits - load_model(ref_dir)(ids)).abs().max().item() <= 1e-5
    # ... and quantization really happened: the unquantized original differs.
    orig = write_random_checkpoint(tmp_path / "orig", preset="tiny", seed=1)
    assert (fp8_logits - load_model(orig)(ids)).abs().max().item() > 1e-3


def test_indexer_tensors_on_shared_layers_and_mtp_copies_are_tolerated(tiny_checkpoint, tmp_path):
    raw = _read_all(tiny_checkpoint)
    extra = dict(raw)
    for name, t in raw.items():  # DeepSeek-V3.2 + IndexCache style: indexer weights on every layer
        if name.startswith("model.layers.0.self_attn.indexer."):
            extra[name.replace("layers.0.", "layers.2.")] = t.clone()
    extra["model.layers.4.embed_tokens.weight"] = raw["model.embed_tokens.weight"].clone()
    extra["model.layers.4.shared_head.head.weight"] = raw["lm_head.weight"].clone()
    ids = torch.randint(0, 512, (1, 16), generator=torch.Generator().manual_seed(0))
    loaded = load_model(_rewrite(tiny_checkpoint, tmp_path / "extra", extra))
    assert loaded.model.layers[2].self_attn.indexer is None
    assert torch.equal(loaded(ids), load_model(tiny_checkpoint)(ids))


def test_mismatches_name_every_tensor_and_both_shapes(tiny_checkpoint, tmp_path):
    raw = _read_all(tiny_checkpoint)
    bad = dict(raw)
    del bad["model.layers.3.self_attn.o_proj.weight"]
    del bad["model.layers.1.mlp.experts.6.up_proj.weight"]
    bad["model.layers.0.self_attn.kv_b_proj.weight"] = torch.zeros(7, 32)
    bad["model.layers.3.mlp.experts.2.down_proj.weight"] = torch.zeros(64, 31)
    bad["model.layers.1.self_attn.rotary.inv_freq"] = torch.zeros(4)
    with pytest.raises(CheckpointError) as err:
        load_model(_rewrite(tiny_checkpoint, tmp_path / "bad", bad))
    msg = str(err.value)
    assert "model.layers.3.self_attn.o_proj.weight: missing (model shape [64, 64])" in msg
    assert "model.layers.1.mlp.experts.6.up_proj.weight: missing" in msg
    assert "model.layers.0.self_attn.kv_b_proj.weight: checkpoint shape [7, 32] != model shape [128, 32]" in msg
    assert "model.layers.3.mlp.experts.2.down_proj.weight: checkpoint shape [64, 31] != model shape [64, 32]" in msg
    assert "model.layers.1.self_attn.rotary.inv_freq: unexpected tensor [4]" in msg


def test_missing_mtp_layer_is_an_error_unless_disabled(tiny_checkpoint, tmp_path):
    raw = {k: v for k, v in _read_all(tiny_checkpoint).items() if not k.startswith("model.layers.4.")}
    path = _rewrite(tiny_checkpoint, tmp_path / "no-mtp", raw)
    with pytest.raises(CheckpointError, match=r"model\.layers\.4\.eh_proj\.weight: missing"):
        load_model(path)
    assert load_model(path, mtp=False).config.num_mtp_layers == 0


def test_mtp_false_skips_the_checkpoints_mtp_layer(tiny_checkpoint):
    model = load_model(tiny_checkpoint, mtp=False)
    assert model.config.num_mtp_layers == 0
    assert len(model.model.layers) == model.config.num_hidden_layers
    assert not any(k.startswith(f"model.layers.{model.config.num_hidden_layers}.") for k in model.state_dict())
    full = load_model(tiny_checkpoint)
    ids = torch.tensor([[5, 9, 33, 7, 100, 42, 3, 8, 17, 250, 11, 64]])
    torch.testing.assert_close(model(ids), full(ids), rtol=0, atol=0)


def test_random_checkpoint_config_names_num_key_value_heads(tiny_checkpoint):
    from transformers import AutoConfig

    raw = json.loads((tiny_checkpoint / "config.json").read_text())
    assert raw["num_key_value_heads"] == raw["num_attention_heads"]
    assert AutoConfig.from_pretrained(tiny_checkpoint).num_key_value_heads == raw["num_attention_heads"]


_PEAK_SCRIPT = textwrap.dedent(
    """
    import sys, threading, time, torch
    from inference.config import ModelConfig
    from inference.loader import load_model
    from inference.model import Glm5ForCausalLM

    def anon_kb():
        for line in open("/proc/self/status"):
            if line.startswith("RssAnon:"):
                return int(line.split()[1])

    # torch's first module construction costs a fixed ~75 MB (lazy library init) whatever the model
    # size; pay it before the baseline so the ratio measures the weights.
    with torch.device("meta"):
        Glm5ForCausalLM(ModelConfig.from_pretrained(sys.argv[1]))
    base, peak, done = anon_kb(), [0], [False]
    def sample():
        while not done[0]:
            peak[0] = max(peak[0], anon_kb()); time.sleep(0.002)
    t = threading.Thread(target=sample); t.start()
    model = load_model(sys.argv[1], dtype=torch.float32)
    done[0] = True; t.join()
    size = sum(p.numel() * p.element_size() for p in model.parameters())
    print((peak[0] - base) * 1024 / size)
    """
)


def test_peak_memory_stays_near_the_model_size(tmp_path):
    """Anonymous memory while loading (file-backed mmap pages excluded) <= 1.3x the loaded model."""
    path = write_random_checkpoint(tmp_path / "mem", preset="tiny", seed=0, shards=3,
                                   overrides=dict(hidden_size=256, moe_intermediate_size=128, n_routed_experts=16))  # fmt: skip
    out = subprocess.run([sys.executable, "-c", _PEAK_SCRIPT, str(path)], capture_output=True, text=True, check=True)
    assert float(out.stdout.strip()) <= 1.3
