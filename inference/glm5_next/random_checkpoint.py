"""Random GLM-5.3-Flash checkpoints in the release's on-disk layout (`preset="flash-tiny"`).

The layout is what transformers' save_pretrained writes for Glm5NextForConditionalGeneration and
its conversion mapping reads back: a `glm5_next` config.json with `text_config` (+ a
`vision_config`), tensors under `model.language_model.`, per-expert weights, separate
q/k/v_conv1d, `hc_attn_*` / `hc_ffn_*`, forget-gate parameters directly under `self_attn`.
Weights are O(1)-activation random draws (1/sqrt(fan_in)), with forget-gate parameters in ranges
that make decays neither ~1 nor ~0. fp8=True stores the large projections as e4m3 with block
scales. A small vision tower (`model.visual.*`, 1 block) is written too, so transformers loads
every tensor and image prompts run end to end: the tokenizer ships the glm-5.3-flash chat template,
config.json puts the image/video placeholder ids at the tokenizer's ids, and
preprocessor_config.json holds the image processor's settings.
"""

from __future__ import annotations

import dataclasses
import difflib
import json
import math
import re
from pathlib import Path
from typing import Any

import torch

from inference.fp8 import quantize_blockwise
from inference.glm5_next.config import Glm5NextTextConfig

FLASH_PRESETS: dict[str, dict[str, Any]] = {
    # 8 layers (KDA 0-2, 4-6; DSA 3, 7), index_topk 8 = 2 pools of 4, 32 indexer heads (as released).
    "flash-tiny": dict(
        vocab_size=512, hidden_size=64, intermediate_size=128, moe_intermediate_size=32, num_hidden_layers=8,
        num_attention_heads=4, num_key_value_heads=4, q_lora_rank=32, kv_lora_rank=32, qk_nope_head_dim=16,
        qk_rope_head_dim=0, v_head_dim=16, n_routed_experts=8, n_shared_experts=1, num_experts_per_tok=2,
        index_topk=8, index_n_heads=32, index_head_dim=16, index_kpool=4, linear_head_dim=16, linear_num_heads=4,
        linear_conv_kernel_dim=4, max_position_embeddings=65536,
    ),
    # Big enough for CPU throughput numbers (a few hundred MB fp32).
    "flash-small": dict(
        vocab_size=8192, hidden_size=512, intermediate_size=1024, moe_intermediate_size=256, num_hidden_layers=8,
        num_attention_heads=8, num_key_value_heads=8, q_lora_rank=256, kv_lora_rank=128, qk_nope_head_dim=64,
        qk_rope_head_dim=0, v_head_dim=64, n_routed_experts=32, n_shared_experts=1, num_experts_per_tok=4,
        index_topk=64, index_n_heads=32, index_head_dim=64, index_kpool=4, linear_head_dim=64, linear_num_heads=8,
        linear_conv_kernel_dim=4, max_position_embeddings=65536,
    ),
}  # fmt: skip

_COMMON = dict(
    model_type="glm5_next_text", hidden_act="silu", rms_norm_eps=1e-5, routed_scaling_factor=2.5, norm_topk_prob=True,
    n_group=1, topk_group=1, swiglu_limit=10.0, linear_lower_bound=-5.0, hc_mult=4, hc_eps=1e-6,
    hc_sinkhorn_iters=20, index_kpool_always_select_tail=True, tie_word_embeddings=False, attention_bias=False,
    pad_token_id=0, eos_token_id=[1],
)  # fmt: skip
_MEDIA_TOKENS = {"image_token_id": "<|image|>", "image_start_token_id": "<|begin_of_image|>",
                 "image_end_token_id": "<|end_of_image|>", "video_start_token_id": "<|begin_of_video|>",
                 "video_end_token_id": "<|end_of_video|>"}
_VISION = dict(depth=1, hidden_size=32, num_heads=2, intermediate_size=32, out_hidden_size=64,
               projection_intermediate_size=32, patch_size=14, spatial_merge_size=2, temporal_patch_size=2)
_QUANTIZED = re.compile(
    r"(self_attn\.(q_proj|k_proj|v_proj|o_proj|q_a_proj|q_b_proj|kv_a_proj_with_mqa|kv_b_proj)"
    r"|mlp\.(gate_proj|up_proj|down_proj)|experts\.\d+\.(gate_proj|up_proj|down_proj)"
    r"|shared_experts\.(gate_proj|up_proj|down_proj))\.weight$"
)


def flash_text_config(preset: str, overrides: dict[str, Any] | None = None) -> dict[str, Any]:
    if preset not in FLASH_PRESETS:
        raise ValueError(f"preset={preset!r}: expected one of {sorted(FLASH_PRESETS)}")
    return {**_COMMON, **FLASH_PRESETS[preset], **(overrides or {})}


def disk_name(ours: str) -> str:
    """Our parameter name -> the release's tensor name (the inverse of loader.our_name)."""
    name = re.sub(r"\.self_attn\.forget_gate\.", ".self_attn.", ours)
    name = re.sub(r"\.attn_hc\.(fn|base|scale)$", r".hc_attn_\1", name)
    name = re.sub(r"\.ffn_hc\.(fn|base|scale)$", r".hc_ffn_\1", name)
    if name.startswith("model.visual."):
        return name  # the vision tower's names are the same on disk
    return "model.language_model." + name[len("model."):] if name.startswith("model.") else name


def random_flash_tensors(config: Glm5NextTextConfig, seed: int, dtype: torch.dtype) -> dict[str, torch.Tensor]:
    from inference.glm5_next.model import Glm5NextForCausalLM

    with torch.device("meta"):
        model = Glm5NextForCausalLM(config, vision=config.vision_config is not None)
        shapes = {k: tuple(v.shape) for k, v in model.state_dict().items()}
    gen = torch.Generator().manual_seed(seed)

    def draw(shape, scale=1.0, base=0.0, to=dtype):
        return (base + scale * torch.randn(shape, generator=gen)).to(to)

    out: dict[str, torch.Tensor] = {}
    for name, shape in shapes.items():
        disk = disk_name(name)
        if name.endswith("experts.gate_up_proj") or name.endswith("experts.down_proj"):
            prefix = disk.rsplit(".", 1)[0]
            for e in range(shape[0]):
                if name.endswith("gate_up_proj"):
                    for kind in ("gate_proj", "up_proj"):
                        out[f"{prefix}.{e}.{kind}.weight"] = draw((shape[1] // 2, shape[2]), shape[2] ** -0.5)
                else:
                    out[f"{prefix}.{e}.down_proj.weight"] = draw(shape[1:], shape[2] ** -0.5)
        elif name.endswith("conv1d.weight"):  # stored as three [D, 1, K] tensors, fp32
            prefix = disk.rsplit(".", 2)[0]
            for part in "qkv":
                out[f"{prefix}.{part}_conv1d.weight"] = draw((shape[0] // 3, 1, shape[2]), shape[2] ** -0.5, to=torch.float32)
        elif name.endswith(("A_log", "dt_bias")):
            out[disk] = draw(shape, 0.5, to=torch.float32)
        elif name.endswith(("hc.scale",)):
            out[disk] = draw(shape, 0.1, 1.0, torch.float32)
        elif name.endswith(("hc.base", "e_score_correction_bias")):
            out[disk] = draw(shape, 0.1, to=torch.float32)
        elif name.endswith("mlp.gate.weight"):
            out[disk] = draw(shape, shape[-1] ** -0.5, to=torch.float32)
        elif name.endswith(".bias"):
            out[disk] = draw(shape, 0.1)
        elif len(shape) == 1:
            out[disk] = draw(shape, 0.1, 1.0)
        elif name.endswith("embed_tokens.weight"):
            out[disk] = draw(shape)
        else:  # linear and conv weights: 1 / sqrt(fan_in)
            out[disk] = draw(shape, math.prod(shape[1:]) ** -0.5)
    return out


def check_flash_args(preset: str, overrides: dict[str, Any] | None, shards: int) -> None:
    """Everything about a request that can be wrong, checked before any file is touched."""
    if shards < 1:
        raise ValueError(f"shards={shards}: expected at least 1 safetensors file")
    known = {f.name for f in dataclasses.fields(Glm5NextTextConfig)} - {"extra", "vision_config", "weight_block_size"}
    known |= {"model_type", "linear_attn_config", "index_topk_pattern", "index_topk_freq", "index_skip_topk_offset"}
    for key in overrides or {}:
        if key not in known:  # a typo would otherwise land in config.json unread
            close = difflib.get_close_matches(key, sorted(known), n=3)
            hint = f"; did you mean {' or '.join(map(repr, close))}?" if close else ""
            raise ValueError(f"--set {key}: not a GLM-5.3-Flash text config field{hint}")
    Glm5NextTextConfig.from_dict(flash_text_config(preset, overrides))


def write_flash_checkpoint(out_dir: str | Path, preset: str = "flash-tiny", seed: int = 0,
                           overrides: dict[str, Any] | None = None, fp8: bool = False, shards: int = 2,
                           dtype: torch.dtype = torch.bfloat16, fp8_block: tuple[int, int] = (8, 8)) -> Path:
    from inference.random_checkpoint import _write_shards
    from inference.tokenizer_training import write_tokenizer_files

    check_flash_args(preset, overrides, shards)  # refuse bad overrides before any file is written
    text = flash_text_config(preset, overrides)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    tokenizer = write_tokenizer_files(out, variant="glm-5.3-flash")  # the release ships the Flash template
    text["vocab_size"] = max(text["vocab_size"], tokenizer["vocab_size"])
    ids = tokenizer["special_tokens"]
    text["pad_token_id"] = ids["<|endoftext|>"]
    text["eos_token_id"] = [ids[n] for n in ("<|endoftext|>", "<|user|>", "<|observation|>")]
    # The placeholders at the tokenizer's ids (the release's 154854.. are past this vocabulary).
    media = {name: ids[token] for name, token in _MEDIA_TOKENS.items()}
    vision = {**_VISION, "out_hidden_size": text["hidden_size"]}
    config = Glm5NextTextConfig.from_dict({"model_type": "glm5_next", "text_config": text, "vision_config": vision})
    tensors = random_flash_tensors(config, seed, dtype)
    raw: dict[str, Any] = {
        "architectures": ["Glm5NextForConditionalGeneration"], "model_type": "glm5_next",
        "text_config": text, "vision_config": vision, **media,
        "tie_word_embeddings": False, "torch_dtype": str(dtype).removeprefix("torch."),
    }  # fmt: skip
    if fp8:
        tensors = {k2: v2 for k, v in tensors.items() for k2, v2 in _maybe_quantize(k, v, fp8_block)}
        raw["quantization_config"] = {"quant_method": "fp8", "fmt": "e4m3", "activation_scheme": "dynamic",
                                      "weight_block_size": list(fp8_block)}  # fmt: skip
    _write_shards(out, tensors, shards)
    (out / "config.json").write_text(json.dumps(raw, indent=2) + "\n", encoding="utf-8")
    generation = {"eos_token_id": text["eos_token_id"], "pad_token_id": text["pad_token_id"]}
    (out / "generation_config.json").write_text(json.dumps(generation, indent=2) + "\n", encoding="utf-8")
    (out / "preprocessor_config.json").write_text(json.dumps(_processor(vision), indent=2) + "\n", encoding="utf-8")
    return out


def _processor(vision: dict[str, Any]) -> dict[str, Any]:
    """preprocessor_config.json as transformers' Glm5NextImageProcessor saves it (what AutoProcessor
    and image_inputs.ProcessorSettings read). A small token budget keeps test images cheap."""
    return {"image_processor_type": "Glm5NextImageProcessor", "do_convert_rgb": True, "do_resize": True,
            "do_rescale": True, "do_normalize": True, "resample": 3, "rescale_factor": 1 / 255,
            "image_mean": [0.48145466, 0.4578275, 0.40821073], "image_std": [0.26862954, 0.26130258, 0.27577711],
            "patch_size": vision["patch_size"], "temporal_patch_size": vision["temporal_patch_size"],
            "merge_size": vision["spatial_merge_size"], "patch_expand_factor": 1, "min_image_tokens": 4,
            "max_image_tokens": 64, "size": {"longest_edge": 1}}


def _maybe_quantize(name: str, t: torch.Tensor, block: tuple[int, int]):
    if _QUANTIZED.search(name):
        q, s = quantize_blockwise(t, block)
        return [(name, q), (name + "_scale_inv", s)]
    return [(name, t)]

