"""Load a GLM-5.x checkpoint (sharded safetensors, real on-disk names) into Glm5ForCausalLM.

- Shards are opened memory-mapped and read one tensor at a time; the model is built on the meta
  device and every parameter is materialised exactly once, so peak memory is the loaded model
  plus the largest single tensor (plus one expert stack being packed).
- Per-expert tensors `mlp.experts.{e}.{gate,up,down}_proj.weight` are packed into
  `gate_up_proj` [E, 2I, H] and `down_proj` [E, H, I] (transformers' packed names are accepted too).
- FP8: a `.weight` with a `.weight_scale_inv` sibling is e4m3 with block scales. weight_format
  "dequant" dequantizes it to the target dtype; "fp8" / "fp8_w8a8" keep it e4m3 + scales on the
  device (fp8_resident.py says which modules; layers/fp8_linear.py how they multiply). An FP8
  weight without its scale, or with a mis-shaped one, is refused before anything is read.
- Indexer tensors on IndexShare "shared" layers and the MTP layer's optional copies of
  embed_tokens / shared_head.head are tolerated and skipped.
- Anything else missing, unexpected or mis-shaped is an error that names every such tensor.
"""

from __future__ import annotations

import json
import re
from collections import defaultdict
from pathlib import Path

import torch
from safetensors import safe_open

from inference.config import ModelConfig
from inference.fp8 import DEFAULT_BLOCK, dequantize_blockwise
from inference.fp8_resident import make_fp8_resident, scale_errors
from inference.layers.fp8_linear import check_weight_format
from inference.model import Glm5ForCausalLM

_EXPERT = re.compile(r"^(model\.layers\.\d+\.mlp\.experts)\.(\d+)\.(gate_proj|up_proj|down_proj)\.weight$")
_INDEXER = re.compile(r"^model\.layers\.(\d+)\.self_attn\.indexer\.")
_MTP_OPTIONAL = re.compile(r"^model\.layers\.(\d+)\.(embed_tokens\.weight|shared_head\.head\.weight)$")
# Kept in fp32 whatever the load dtype (router precision matters for expert choice; transformers
# keeps the same three in fp32).
_FP32 = re.compile(r"(mlp\.gate\.weight|e_score_correction_bias|indexer\.weights_proj\.weight)$")


class CheckpointError(ValueError):
    """The checkpoint does not fit the model; the message lists every offending tensor."""


def checkpoint_files(path: Path) -> dict[str, Path]:
    """tensor name -> shard file."""
    index = path / "model.safetensors.index.json"
    if index.is_file():
        weight_map = json.loads(index.read_text(encoding="utf-8"))["weight_map"]
        return {name: path / file for name, file in weight_map.items()}
    files = sorted(path.glob("*.safetensors"))
    if not files:
        raise CheckpointError(f"no model.safetensors.index.json or *.safetensors in {path}")
    out: dict[str, Path] = {}
    for f in files:
        with safe_open(f, framework="pt") as sf:
            out.update({name: f for name in sf.keys()})
    return out


class _Shards:
    """Open shard handles (memory-mapped), one per file, for the duration of a load."""

    def __init__(self, files: dict[str, Path]):
        self.files = files
        self._open: dict[Path, object] = {}

    def handle(self, name: str):
        f = self.files[name]
        if f not in self._open:
            self._open[f] = safe_open(f, framework="pt")
        return self._open[f]

    def shape(self, name: str) -> tuple[int, ...]:
        return tuple(self.handle(name).get_slice(name).get_shape())

    def dtype(self, name: str) -> str:
        return self.handle(name).get_slice(name).get_dtype()

    def get(self, name: str) -> torch.Tensor:
        return self.handle(name).get_tensor(name)


def load_model(
    path: str | Path,
    dtype: torch.dtype = torch.float32,
    device: str | torch.device = "cpu",
    latent_norm_eps: float | None = None,
    mtp: bool = True,
    weight_format: str = "dequant",
) -> Glm5ForCausalLM:
    """Build the model from `path` (a checkpoint directory). mtp=False drops the MTP layer.
    weight_format: "dequant" (FP8 dequantized at load), "fp8" or "fp8_w8a8" (FP8 kept resident)."""
    check_weight_format(weight_format)
    path = Path(path)
    overrides = {} if latent_norm_eps is None else {"latent_norm_eps": latent_norm_eps}
    if not mtp:
        overrides["num_nextn_predict_layers"] = 0
    config = ModelConfig.from_pretrained(path, **overrides)
    shards = _Shards(checkpoint_files(path))
    block = config.weight_block_size or DEFAULT_BLOCK
    with torch.device("meta"):
        model = Glm5ForCausalLM(config)
        if weight_format != "dequant":
            fp8 = {n for n in shards.files if n + "_scale_inv" in shards.files}
            make_fp8_resident(model, config, block, weight_format, fp8.__contains__)
    meta = model.state_dict()
    expected = {k: tuple(v.shape) for k, v in meta.items()}
    # FP8-resident parameters (e4m3 weights and their fp32 scales) load as stored.
    resident = {k: v.dtype for k, v in meta.items() if v.dtype == torch.float8_e4m3fn or k.endswith("_scale_inv")}
    errors = scale_errors({n: (shards.shape(n), shards.dtype(n)) for n in shards.files}, block)
    plan, plan_errors = _plan(config, expected, shards, block)
    errors += plan_errors
    if errors:
        raise CheckpointError(f"checkpoint {path} does not match the model config:\n  " + "\n  ".join(errors))

    def read(name: str, target: torch.dtype, as_stored: bool = False) -> torch.Tensor:
        t = shards.get(name)
        if as_stored:
            if t.dtype != target:
                raise CheckpointError(f"{name}: stored as {t.dtype}, expected {target} for an FP8-resident weight")
            return t
        scale = name + "_scale_inv"
        if scale in shards.files:
            try:
                return dequantize_blockwise(t, shards.get(scale), block, target)
            except ValueError as exc:
                raise CheckpointError(f"{scale}: {exc}") from None
        if t.dtype in (torch.float8_e4m3fn, torch.float8_e5m2):
            raise CheckpointError(f"{name}: stored as {t.dtype} but {scale} is missing")
        return t.to(target)

    state: dict[str, torch.Tensor] = {}
    for param, source in plan.items():
        target = resident.get(param) or (torch.float32 if _FP32.search(param) else dtype)
        if isinstance(source, str):
            state[param] = read(source, target, param in resident).to(device)
            continue
        packed = torch.empty(expected[param], dtype=target, device=device)
        for (e, row0), name in source.items():
            t = read(name, target, param in resident)
            packed[e, row0 : row0 + t.shape[0]] = t.to(device)
        state[param] = packed
    if "lm_head.weight" not in state:  # tie_word_embeddings (checked in _plan)
        state["lm_head.weight"] = state["model.embed_tokens.weight"]
    model.load_state_dict(state, strict=True, assign=True)
    # The model owns the tensors now; dropping these references lets fuse_weights free each
    # original as soon as its re-laid-out replacement exists (peak: one layer's extra copy).
    state.clear()
    model.fuse_weights()
    return model.eval()


def _plan(config: ModelConfig, expected: dict[str, tuple[int, ...]], shards: _Shards, block=DEFAULT_BLOCK):
    """Map every model parameter to its checkpoint source; collect every mismatch."""
    plan: dict[str, object] = {}
    errors: list[str] = []
    experts: dict[str, dict] = defaultdict(dict)
    inter = config.moe_intermediate_size
    names = set(shards.files)
    mtp_prefix = f"model.layers.{config.num_hidden_layers}."
    for name in sorted(names):
        if not config.num_mtp_layers and name.startswith(mtp_prefix):
            continue  # MTP layer present but not requested (mtp=False): never read
        if name.endswith("_scale_inv"):
            if name[: -len("_scale_inv")] not in names:
                errors.append(f"{name}: unexpected (no matching weight)")
            elif name in expected:  # an FP8-resident layer's scale (shapes: fp8_resident.scale_errors)
                plan[name] = name
            continue
        m = _EXPERT.match(name)
        if m:
            prefix, e, kind = m.group(1), int(m.group(2)), m.group(3)
            param = f"{prefix}.{'down_proj' if kind == 'down_proj' else 'gate_up_proj'}"
            if param not in expected:
                errors.append(f"{name}: unexpected (no MoE experts at {prefix})")
                continue
            want = expected[param][1:]
            want = (inter, want[1]) if kind != "down_proj" else want
            got = shards.shape(name)
            if e >= expected[param][0]:
                errors.append(f"{name}: unexpected (expert {e} >= n_routed_experts={expected[param][0]})")
            elif got != want:
                errors.append(f"{name}: checkpoint shape {list(got)} != model shape {list(want)}")
            else:
                experts[param][(e, inter if kind == "up_proj" else 0)] = name
            continue
        if name not in expected:
            m = _INDEXER.match(name)
            if m and not config.is_full_indexer(int(m.group(1))):
                continue  # IndexShare "shared" layer: checkpoints may ship unused indexer weights
            if _MTP_OPTIONAL.match(name) and int(_MTP_OPTIONAL.match(name).group(1)) >= config.num_hidden_layers:
                continue  # optional copies of the target's embed_tokens / lm_head
            errors.append(f"{name}: unexpected tensor {list(shards.shape(name))}")
            continue
        got = shards.shape(name)
        if got != expected[name]:
            errors.append(f"{name}: checkpoint shape {list(got)} != model shape {list(expected[name])}")
        plan[name] = name
    for param, parts in experts.items():
        n_experts = expected[param][0]
        rows = (0, inter) if param.endswith("gate_up_proj") else (0,)
        kinds = {0: "gate_proj", inter: "up_proj"} if len(rows) == 2 else {0: "down_proj"}
        prefix = param.rsplit(".", 1)[0]
        for e in range(n_experts):
            for r in rows:
                if (e, r) not in parts:
                    errors.append(f"{prefix}.{e}.{kinds[r]}.weight: missing")
        plan[param] = parts
        if param + "_scale_inv" in expected:  # FP8-resident experts: pack the scale rows alike
            plan[param + "_scale_inv"] = {(e, r // block[0]): n + "_scale_inv" for (e, r), n in parts.items()}
            errors += [f"{n}_scale_inv: missing (this layer's experts are FP8-resident)" for n in parts.values()
                       if n + "_scale_inv" not in names]  # fmt: skip
    for param, shape in expected.items():
        if param in plan:
            continue
        if param == "lm_head.weight" and config.tie_word_embeddings:
            continue
        errors.append(f"{param}: missing (model shape {list(shape)})")
    return plan, errors
