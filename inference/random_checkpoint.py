"""Write random GLM-5.x checkpoints in the real on-disk format (for tests, benchmarks, demos).

The output is what a real release looks like: config.json, sharded safetensors with a
model.safetensors.index.json, per-expert tensor names, an MTP layer at index num_hidden_layers,
optionally FP8 e4m3 weights with 128x128 `weight_scale_inv` blocks, and (when the chat package's
tokenizer trainer is installed) a tokenizer whose special ids set eos/pad.

`device="cuda"` draws (and quantizes) the weights on the GPU, each tensor as it is made: the
"glm53-2layer" preset (GLM-5.3 at full width, ~14 GB in FP8) takes seconds there and would take
many minutes on a CPU. `printable=True` zeroes lm_head's rows past the tokenizer's vocabulary, so
a random model's greedy choices are ids the tokenizer can print (a serving benchmark then streams
text for every token instead of a 154,880-id model picking unprintable ids 99% of the time).
"""

from __future__ import annotations

import dataclasses
import difflib
import importlib
import importlib.util
import json
import math
import re
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import save_file

from inference.config import ModelConfig
from inference.fp8 import DEFAULT_BLOCK, quantize_blockwise

PRESETS: dict[str, dict[str, Any]] = {
    # Small enough for unit tests; index_topk 8 so short prompts already exercise sparse selection;
    # IndexShare freq 2 / offset 2 gives full, full, shared, full. 16 indexer heads: a key scores an
    # exact tie (all heads ReLU-clipped) with probability 2^-16, so transformers and we pick the same keys.
    "tiny": dict(
        vocab_size=512, hidden_size=64, intermediate_size=128, moe_intermediate_size=32,
        num_hidden_layers=4, num_attention_heads=4, q_lora_rank=32, kv_lora_rank=32,
        qk_nope_head_dim=16, qk_rope_head_dim=8, v_head_dim=16, n_routed_experts=8, n_shared_experts=1,
        num_experts_per_tok=2, n_group=2, topk_group=1, first_k_dense_replace=1, index_topk=8,
        index_n_heads=16, index_head_dim=16, index_topk_freq=2, index_skip_topk_offset=2,
        max_position_embeddings=4096,
    ),
    # A few hundred MB in fp32: big enough for meaningful CPU throughput numbers.
    "small": dict(
        vocab_size=8192, hidden_size=512, intermediate_size=1024, moe_intermediate_size=256,
        num_hidden_layers=6, num_attention_heads=8, q_lora_rank=256, kv_lora_rank=128,
        qk_nope_head_dim=64, qk_rope_head_dim=32, v_head_dim=64, n_routed_experts=32, n_shared_experts=1,
        num_experts_per_tok=4, n_group=4, topk_group=2, first_k_dense_replace=1, index_topk=64,
        index_n_heads=16, index_head_dim=64, index_topk_freq=2, index_skip_topk_offset=2,
        max_position_embeddings=32768,
    ),
    # GLM-5.3 at full width (inference/configs/glm-5.3-fp8.json) with 2 layers, dense + MoE, and
    # no MTP layer: the GPU check's engine stage serves it. Draw it with device="cuda".
    "glm53-2layer": dict(
        vocab_size=154880, hidden_size=6144, intermediate_size=12288, moe_intermediate_size=2048,
        num_hidden_layers=2, num_attention_heads=64, q_lora_rank=2048, kv_lora_rank=512,
        qk_nope_head_dim=192, qk_rope_head_dim=64, v_head_dim=256, n_routed_experts=256, n_shared_experts=1,
        num_experts_per_tok=8, n_group=1, topk_group=1, first_k_dense_replace=1, index_topk=2048,
        index_n_heads=32, index_head_dim=128, index_topk_freq=4, index_skip_topk_offset=3,
        num_nextn_predict_layers=0, max_position_embeddings=202752,
    ),
}  # fmt: skip

_COMMON = dict(
    model_type="glm_moe_dsa", architectures=["GlmMoeDsaForCausalLM"], hidden_act="silu",
    rms_norm_eps=1e-5, rope_parameters={"rope_theta": 1e6, "rope_type": "default"}, rope_interleave=True,
    indexer_rope_interleave=True, routed_scaling_factor=2.5, norm_topk_prob=True, scoring_func="sigmoid",
    topk_method="noaux_tc", moe_router_dtype="float32", num_nextn_predict_layers=1, tie_word_embeddings=False,
    attention_bias=False, torch_dtype="bfloat16", bos_token_id=0, eos_token_id=[0], pad_token_id=0,
)  # fmt: skip

STOP_TOKEN_NAMES = ("<|endoftext|>", "<|user|>", "<|observation|>")
# Weights quantized in the FP8 release (docs/glm5-model.md §C.2); everything else stays bf16/fp32.
_QUANTIZED = re.compile(
    r"(self_attn\.(q_a_proj|q_b_proj|kv_a_proj_with_mqa|kv_b_proj|o_proj|indexer\.wq_b|indexer\.wk)"
    r"|mlp\.(gate_proj|up_proj|down_proj)|experts\.\d+\.(gate_proj|up_proj|down_proj)"
    r"|shared_experts\.(gate_proj|up_proj|down_proj))\.weight$"
)


# config.json keys ModelConfig.from_dict reads although they are not its fields (aliases, the
# raw forms of derived fields), plus the ones transformers needs that we write anyway.
_READ_KEYS = {"index_topk_pattern", "index_topk_freq", "index_skip_topk_offset", "rope_parameters", "rope_scaling",
              "quantization_config", "num_experts", "num_key_value_heads", "head_dim", "qk_head_dim"}
# Everything we write into a checkpoint folder; --force removes only these (and *.safetensors).
CHECKPOINT_FILES = ("config.json", "generation_config.json", "model.safetensors.index.json", "tokenizer.json",
                    "tokenizer_config.json", "chat_template.jinja")


def known_config_keys() -> set[str]:
    fields = {f.name for f in dataclasses.fields(ModelConfig)} - {"extra"}
    presets = {k for p in PRESETS.values() for k in p}
    return fields | presets | set(_COMMON) | _READ_KEYS


def check_override_keys(overrides: dict[str, Any]) -> None:
    """A typo in --set would otherwise land in config.json unread, and nobody would notice."""
    known = known_config_keys()
    for key in overrides:
        if key not in known:
            close = difflib.get_close_matches(key, sorted(known), n=3)
            hint = f"; did you mean {' or '.join(map(repr, close))}?" if close else ""
            raise ValueError(f"--set {key}: not a GLM-5.x config field{hint}")


def preset_config(preset: str, overrides: dict[str, Any] | None = None) -> dict[str, Any]:
    if preset not in PRESETS:
        raise ValueError(f"preset={preset!r}: expected one of {sorted(PRESETS)}")
    check_override_keys(overrides or {})
    return {**_COMMON, **PRESETS[preset], **(overrides or {})}


def check_args(preset: str, overrides: dict[str, Any] | None, shards: int) -> None:
    """Everything about a request that can be wrong, checked before any file is touched."""
    if shards < 1:
        raise ValueError(f"shards={shards}: expected at least 1 safetensors file")
    raw = preset_config(preset, overrides)
    raw.setdefault("num_key_value_heads", raw["num_attention_heads"])
    ModelConfig.from_dict(raw)


def clear_checkpoint_files(out: Path) -> None:
    """Remove a previous checkpoint's files (weights, index, config, tokenizer) and nothing else,
    so a rewrite with fewer shards leaves no stale shard behind."""
    for path in [*out.glob("*.safetensors"), *(out / name for name in CHECKPOINT_FILES)]:
        if path.is_file():
            path.unlink()


def write_random_checkpoint(
    out_dir: str | Path,
    preset: str = "tiny",
    seed: int = 0,
    overrides: dict[str, Any] | None = None,
    fp8: bool = False,
    shards: int = 2,
    dtype: torch.dtype = torch.bfloat16,
    fp8_block: tuple[int, int] = DEFAULT_BLOCK,
    device: str | torch.device = "cpu",
    printable: bool = False,
) -> Path:
    """fp8_block: the [rows, cols] of each FP8 scale block (written as quantization_config.
    weight_block_size); tiny presets need small blocks, e.g. (8, 8), for scales to vary in a matrix.
    device / printable: see the module docstring."""
    check_args(preset, overrides, shards)
    if len(fp8_block) != 2 or any(int(b) < 1 for b in fp8_block):
        raise ValueError(f"fp8_block={fp8_block!r}: expected two positive ints (rows, cols)")
    fp8_block = (int(fp8_block[0]), int(fp8_block[1]))
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    raw = preset_config(preset, overrides)
    # MLA has one latent per token, but transformers' config defaults num_key_value_heads to 64,
    # which breaks its eager attention on models with fewer heads: write it as the releases do.
    raw.setdefault("num_key_value_heads", raw["num_attention_heads"])
    tokenizer = _write_tokenizer(out)
    if tokenizer is not None:
        raw["vocab_size"] = max(raw["vocab_size"], tokenizer["vocab_size"])
        ids = tokenizer["special_tokens"]
        raw["eos_token_id"] = [ids[n] for n in STOP_TOKEN_NAMES if n in ids] or raw["eos_token_id"]
        raw["pad_token_id"] = ids.get("<|endoftext|>", raw["pad_token_id"])
    if fp8:
        raw["quantization_config"] = {
            "quant_method": "fp8", "fmt": "e4m3", "activation_scheme": "dynamic",
            "weight_block_size": list(fp8_block),
        }  # fmt: skip
    config = ModelConfig.from_dict(raw)  # validates the overrides
    tensors = random_tensors(config, seed, dtype, torch.device(device), fp8_block if fp8 else None)
    if printable and tokenizer is not None:
        tensors["lm_head.weight"][tokenizer["vocab_size"] :] = 0
    _write_shards(out, tensors, shards)
    (out / "config.json").write_text(json.dumps(raw, indent=2) + "\n", encoding="utf-8")
    generation = {"eos_token_id": raw["eos_token_id"], "pad_token_id": raw["pad_token_id"], "temperature": 1.0, "top_p": 0.95}
    (out / "generation_config.json").write_text(json.dumps(generation, indent=2) + "\n", encoding="utf-8")
    return out


def random_tensors(
    config: ModelConfig,
    seed: int,
    dtype: torch.dtype,
    device: torch.device = torch.device("cpu"),
    fp8_block: tuple[int, int] | None = None,
) -> dict[str, torch.Tensor]:
    """On-disk names and shapes, derived from the model's own parameter list (experts unpacked).
    With fp8_block, each weight the FP8 release quantizes is quantized as soon as it is drawn."""
    from inference.model import Glm5ForCausalLM

    with torch.device("meta"):
        shapes = {k: tuple(v.shape) for k, v in Glm5ForCausalLM(config).state_dict().items()}
    gen = torch.Generator(device=device).manual_seed(seed)
    out: dict[str, torch.Tensor] = {}

    def put(name: str, t: torch.Tensor) -> None:
        if fp8_block is not None and _QUANTIZED.search(name):
            out[name], out[name + "_scale_inv"] = quantize_blockwise(t, fp8_block)
        else:
            out[name] = t

    for name, shape in shapes.items():
        if name.endswith("experts.gate_up_proj") or name.endswith("experts.down_proj"):
            prefix = name.rsplit(".", 1)[0]
            for e in range(shape[0]):
                if name.endswith("gate_up_proj"):
                    half = (shape[1] // 2, shape[2])
                    put(f"{prefix}.{e}.gate_proj.weight", _linear(half, gen, dtype))
                    put(f"{prefix}.{e}.up_proj.weight", _linear(half, gen, dtype))
                else:
                    put(f"{prefix}.{e}.down_proj.weight", _linear(shape[1:], gen, dtype))
        elif name.endswith("e_score_correction_bias"):
            put(name, _randn(shape, gen) * 0.1)
        elif name.endswith("mlp.gate.weight"):
            put(name, _linear(shape, gen, torch.float32))
        elif name.endswith("embed_tokens.weight"):
            put(name, _randn(shape, gen).to(dtype))
        elif len(shape) == 1:  # norm weights / LayerNorm bias: near their init, not exactly it
            base = 0.0 if name.endswith(".bias") else 1.0
            put(name, (base + 0.1 * _randn(shape, gen)).to(dtype))
        else:
            put(name, _linear(shape, gen, dtype))
    return out


def _randn(shape, gen: torch.Generator) -> torch.Tensor:
    return torch.randn(tuple(shape), generator=gen, device=gen.device)


def _linear(shape, gen: torch.Generator, dtype: torch.dtype) -> torch.Tensor:
    # 1/sqrt(fan_in) keeps activations O(1) through the layers, so routing and top-k are not degenerate.
    return (_randn(shape, gen) / math.sqrt(shape[-1])).to(dtype)


def _write_shards(out: Path, tensors: dict[str, torch.Tensor], n: int) -> None:
    sizes = {k: t.numel() * t.element_size() for k, t in tensors.items()}
    total = sum(sizes.values())
    groups: list[dict[str, torch.Tensor]] = [{} for _ in range(n)]
    shard_of: dict[str, int] = {}
    acc = 0
    for name, t in tensors.items():
        # weights and their scales stay in one shard, as in the real releases
        owner = name[: -len("_scale_inv")] if name.endswith("_scale_inv") else name
        idx = min(n - 1, acc * n // max(total, 1)) if owner == name else shard_of[owner]
        shard_of[name] = idx
        groups[idx][name] = t.contiguous()
        acc += sizes[name]
    weight_map = {}
    for i, group in enumerate(groups):
        file = f"model-{i + 1:05d}-of-{n:05d}.safetensors"
        save_file({k: t.cpu() for k, t in group.items()}, str(out / file), metadata={"format": "pt"})
        weight_map.update({k: file for k in group})
    index = {"metadata": {"total_size": total}, "weight_map": dict(sorted(weight_map.items()))}
    (out / "model.safetensors.index.json").write_text(json.dumps(index, indent=2) + "\n", encoding="utf-8")


def _write_tokenizer(out: Path) -> dict[str, Any] | None:
    """Use the chat package's tokenizer trainer when it is installed (it owns the vocabulary)."""
    if importlib.util.find_spec("inference.tokenizer_training") is None:
        return None
    module = importlib.import_module("inference.tokenizer_training")
    return module.write_tokenizer_files(out)
