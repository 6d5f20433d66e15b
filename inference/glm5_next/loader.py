"""Load a GLM-5.3-Flash checkpoint (sharded safetensors, on-disk names) into Glm5NextForCausalLM.

On-disk layout (what the release and transformers' save_pretrained write) and the renames
transformers' conversion mapping applies on load (docs/glm5-model.md §G):
- prefix `model.language_model.` (multimodal) or `model.` (flat text-only) -> our `model.`;
- `self_attn.{f_a_proj,f_b_proj,dt_bias,A_log}` -> `self_attn.forget_gate.*`;
- `hc_attn_{fn,base,scale}` / `hc_ffn_*` -> `attn_hc.*` / `ffn_hc.*`;
- `self_attn.{q,k,v}_conv1d.weight` [D, 1, K] concatenated into `self_attn.conv1d.weight`;
- per-expert `mlp.experts.{e}.{gate,up,down}_proj.weight` packed into gate_up_proj / down_proj;
- a `.weight` with a `.weight_scale_inv` sibling is FP8 e4m3 with block scales: dequantized with
  inference/fp8.py's dequantize_blockwise (weight_format "dequant"), or kept e4m3 + scales in
  memory ("fp8": fp8_weights.py says which modules and how they multiply).
Skipped, and counted in `load_notes`: the MTP layer (`layers.{num_hidden_layers}.*`,
`shared_head.*`; transformers ignores them too and there is no oracle for it yet), the vision
tower `model.visual.*` when loaded with vision=False, indexer weights shipped on IndexShare "shared"
layers. Anything else unexpected, missing or mis-shaped is one CheckpointError naming every tensor.
"""

from __future__ import annotations

import logging
import re
from collections import defaultdict
from pathlib import Path

import torch

from inference.fp8 import DEFAULT_BLOCK, dequantize_blockwise
from inference.glm5_next.config import Glm5NextTextConfig
from inference.glm5_next.fp8_weights import make_fp8_resident
from inference.glm5_next.model import Glm5NextForCausalLM
from inference.layers.fp8_linear import E4M3
from inference.loader import CheckpointError, _Shards, checkpoint_files

log = logging.getLogger(__name__)

_RENAMES = [
    (re.compile(r"\.self_attn\.(f_a_proj|f_b_proj|dt_bias|A_log)"), r".self_attn.forget_gate.\1"),
    (re.compile(r"\.hc_attn_(fn|base|scale)$"), r".attn_hc.\1"),
    (re.compile(r"\.hc_ffn_(fn|base|scale)$"), r".ffn_hc.\1"),
]
_CONV = re.compile(r"^(model\.layers\.\d+\.self_attn)\.([qkv])_conv1d\.weight$")
_EXPERT = re.compile(r"^(model\.layers\.\d+\.mlp\.experts)\.(\d+)\.(gate_proj|up_proj|down_proj)\.weight$")
_INDEXER = re.compile(r"^model\.layers\.(\d+)\.self_attn\.indexer\.")
# transformers keeps these in fp32 whatever the load dtype (_keep_in_fp32_modules_strict).
_FP32 = re.compile(r"(mlp\.gate\.weight|e_score_correction_bias|conv1d\.weight|dt_bias|A_log|_hc\.base|_hc\.scale)$")


def our_name(disk: str) -> str:
    """On-disk tensor name -> our parameter name (model.visual.* stays as it is)."""
    if disk.startswith("visual."):
        return "model." + disk
    name = disk
    for prefix in ("model.language_model.", "language_model.model.", "language_model."):
        if name.startswith(prefix):
            name = "model." + name[len(prefix):]
            break
    for pattern, repl in _RENAMES:
        name = pattern.sub(repl, name)
    return name


def load_flash_model(path: str | Path, dtype: torch.dtype = torch.float32, device: str | torch.device = "cpu",
                     weight_format: str = "dequant", vision: bool = True) -> Glm5NextForCausalLM:
    """vision: build and load the vision tower when the checkpoint has one (model.visual.*);
    False skips its tensors (text-only serving). weight_format: "dequant" or "fp8" (FP8 weights
    stay e4m3 + block scales; a checkpoint without FP8 weights loads the same either way)."""
    if weight_format not in ("dequant", "fp8"):
        raise ValueError(f"weight_format={weight_format!r}: GLM-5.3-Flash loads 'dequant' or 'fp8' ('fp8_w8a8' needs "
                         "a fused MoE kernel with the SwiGLU clamp)")
    path = Path(path)
    config = Glm5NextTextConfig.from_pretrained(path)
    shards = _Shards(checkpoint_files(path))
    block = config.weight_block_size or DEFAULT_BLOCK
    has_vision = any(n.startswith(("model.visual.", "visual.")) for n in shards.files)
    vision = vision and has_vision
    with torch.device("meta"):
        model = Glm5NextForCausalLM(config, vision=vision)
        if weight_format == "fp8":
            fp8 = {our_name(n.removesuffix("_scale_inv")) for n in shards.files if n.endswith("_scale_inv")}
            make_fp8_resident(model, config, block, fp8.__contains__)
    expected = {k: tuple(v.shape) for k, v in model.state_dict().items()}
    resident = {k for k, v in model.state_dict().items() if v.dtype == E4M3}  # kept FP8: loaded as stored
    notes: dict[str, int] = defaultdict(int)
    errors: list[str] = []
    plain: dict[str, str] = {}
    convs: dict[str, dict[str, str]] = defaultdict(dict)
    experts: dict[str, dict[tuple[int, str], str]] = defaultdict(dict)
    mtp = f"model.layers.{config.num_hidden_layers}."
    for disk in sorted(shards.files):
        if disk.endswith("_scale_inv"):
            if disk.removesuffix("_scale_inv") not in shards.files:
                errors.append(f"{disk}: unexpected (no matching weight)")
            continue
        name = our_name(disk)
        if name.startswith("model.visual.") and not vision:
            notes["vision tensors skipped (vision=False)"] += 1
            continue
        if name.startswith(mtp) or ".shared_head." in name:
            notes["MTP tensors skipped (transformers ignores them too)"] += 1
            continue
        if m := _CONV.match(name):
            convs[f"{m.group(1)}.conv1d.weight"][m.group(2)] = disk
            continue
        if m := _EXPERT.match(name):
            experts[m.group(1)][(int(m.group(2)), m.group(3))] = disk
            continue
        if name not in expected:
            m = _INDEXER.match(name)
            if m and not config.is_kda(int(m.group(1))) and not config.is_full_indexer(int(m.group(1))):
                notes["indexer tensors of IndexShare 'shared' layers skipped"] += 1
                continue
            errors.append(f"{disk}: unexpected tensor {list(shards.shape(disk))}")
            continue
        if shards.shape(disk) != expected[name]:
            errors.append(f"{disk}: checkpoint shape {list(shards.shape(disk))} != model shape {list(expected[name])}")
        plain[name] = disk
    for param in expected:
        covered = param in plain or param in convs or param.rsplit(".", 1)[0] in experts
        covered = covered or param.removesuffix("_scale_inv") in resident & plain.keys()
        if not covered and not (param == "lm_head.weight" and config.tie_word_embeddings):
            errors.append(f"{param}: missing")
    for param, parts in convs.items():
        if sorted(parts) != ["k", "q", "v"]:
            errors.append(f"{param}: needs q_conv1d, k_conv1d and v_conv1d, found {sorted(parts)}")
    for prefix, parts in experts.items():
        for e in range(config.n_routed_experts):
            for kind in ("gate_proj", "up_proj", "down_proj"):
                if (e, kind) not in parts:
                    errors.append(f"{prefix}.{e}.{kind}.weight: missing")
        extra = sorted({e for e, _ in parts if e >= config.n_routed_experts})
        if extra:
            errors.append(f"{prefix}: experts {extra} >= n_routed_experts={config.n_routed_experts}")
    if errors:
        raise CheckpointError(f"checkpoint {path} does not match its config:\n  " + "\n  ".join(errors))

    def read(disk: str, target: torch.dtype) -> torch.Tensor:
        t = shards.get(disk)
        scale = disk + "_scale_inv"
        if scale in shards.files:
            try:
                return dequantize_blockwise(t, shards.get(scale), block, target).to(device)
            except ValueError as exc:
                raise CheckpointError(f"{scale}: {exc}") from None
        if t.dtype in (torch.float8_e4m3fn, torch.float8_e5m2):
            raise CheckpointError(f"{disk}: stored as {t.dtype} but {scale} is missing")
        return t.to(device=device, dtype=target)

    def target(param: str) -> torch.dtype:
        return torch.float32 if _FP32.search(param) else dtype

    def stored(disk: str, param: str) -> torch.Tensor:
        """An FP8-resident weight or its scales, as the checkpoint has them."""
        t = shards.get(disk)
        if tuple(t.shape) != expected[param]:
            raise CheckpointError(f"{disk}: shape {list(t.shape)} != {list(expected[param])}")
        return t.to(device)

    state: dict[str, torch.Tensor] = {}
    for p, d in plain.items():
        if p in resident:
            state[p], state[p + "_scale_inv"] = stored(d, p), stored(d + "_scale_inv", p + "_scale_inv").float()
        else:
            state[p] = read(d, target(p))
    for param, parts in convs.items():
        state[param] = torch.cat([read(parts[c], target(param)) for c in "qkv"], dim=0)
        if tuple(state[param].shape) != expected[param]:
            raise CheckpointError(f"{param}: concatenated conv shape {list(state[param].shape)} != {list(expected[param])}")
    for prefix, parts in experts.items():
        if f"{prefix}.gate_up_proj" in resident:
            state.update(_fp8_experts(prefix, parts, config.n_routed_experts, shards.get, expected, device))
            continue
        gate_up = torch.empty(expected[f"{prefix}.gate_up_proj"], dtype=dtype, device=device)
        down = torch.empty(expected[f"{prefix}.down_proj"], dtype=dtype, device=device)
        inter = down.shape[2]
        for e in range(config.n_routed_experts):
            for kind, rows in (("gate_proj", slice(0, inter)), ("up_proj", slice(inter, 2 * inter))):
                w = read(parts[(e, kind)], dtype)
                if tuple(w.shape) != (inter, gate_up.shape[2]):
                    raise CheckpointError(f"{parts[(e, kind)]}: shape {list(w.shape)} != {[inter, gate_up.shape[2]]}")
                gate_up[e, rows] = w
            w = read(parts[(e, "down_proj")], dtype)
            if tuple(w.shape) != tuple(down.shape[1:]):
                raise CheckpointError(f"{parts[(e, 'down_proj')]}: shape {list(w.shape)} != {list(down.shape[1:])}")
            down[e] = w
        state[f"{prefix}.gate_up_proj"], state[f"{prefix}.down_proj"] = gate_up, down
    if config.tie_word_embeddings:
        state["lm_head.weight"] = state["model.embed_tokens.weight"]
    model.load_state_dict(state, strict=True, assign=True)
    if config.tie_word_embeddings:
        model.lm_head.weight = model.model.embed_tokens.weight
    model.load_notes = dict(notes)
    for note, count in notes.items():
        log.info("%s: %d %s", path, count, note)
    return model.eval()


def _fp8_experts(prefix: str, parts: dict[tuple[int, str], str], n_experts: int, get, expected: dict,
                 device) -> dict[str, torch.Tensor]:
    """Per-expert e4m3 weights and their scales packed, as stored, into Fp8ClampedExperts' stacks
    (gate rows then up rows per expert)."""
    out = {}
    for packed, kinds in (("gate_up_proj", ("gate_proj", "up_proj")), ("down_proj", ("down_proj",))):
        for suffix in ("", "_scale_inv"):
            name = f"{prefix}.{packed}{suffix}"
            t = torch.stack([torch.cat([get(parts[(e, k)] + suffix) for k in kinds]) for e in range(n_experts)])
            if tuple(t.shape) != expected[name]:
                raise CheckpointError(f"{name}: packed shape {list(t.shape)} != {list(expected[name])}")
            out[name] = t.to(device=device, dtype=torch.float32 if suffix else t.dtype)
    return out
