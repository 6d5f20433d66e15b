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
- Tensor/expert parallel (`parallel`): each rank reads only its slices (`shard_for`, through
  safetensors' get_slice on the mmap, never the whole tensor) and only its own experts; an FP8
  shard that cuts a scale block is read whole, dequantized, then sliced (correct, one tensor's
  peak). `load_stats` reports what a rank read and its peak memory.
"""

from __future__ import annotations

import json
import logging
import math
import re
import resource
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

import torch
from safetensors import safe_open

from inference.config import ModelConfig
from inference.fp8 import DEFAULT_BLOCK, dequantize_blockwise
from inference.fp8_resident import make_fp8_resident, scale_errors
from inference.layers.fp8_linear import check_weight_format
from inference.model import Glm5ForCausalLM
from inference.parallel.shard import (
    REPLICATED, Shard, fp8_block_misalignments, owns_expert, shard_for, validate_layout,
)
from inference.parallel.state import ParallelState

log = logging.getLogger(__name__)

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


def tensor_sizes(files: dict[str, Path]) -> dict[str, int]:
    """Every tensor in the shards of `checkpoint_files` -> its element count, from the shard headers
    (no tensor data is read)."""
    sizes: dict[str, int] = {}
    for file in sorted(set(files.values())):
        with safe_open(file, framework="pt") as sf:
            sizes.update({name: math.prod(sf.get_slice(name).get_shape()) for name in sf.keys()})
    return sizes


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

    def read(self, name: str, shard: Shard) -> torch.Tensor:
        """Only `shard` of the tensor, sliced from the memory map."""
        return shard.read(self.handle(name).get_slice(name), self.shape(name))


@dataclass
class LoadStats:
    """What one rank's load cost (printed by `horizon serve` per rank)."""

    rank: int
    world: int
    param_bytes: int  # resident parameter bytes after the load
    read_bytes: int  # bytes read from the checkpoint (after slicing)
    peak_rss_bytes: int  # the process's peak resident set (includes the interpreter and torch)

    def describe(self) -> str:
        def size(n: int) -> str:
            return f"{n / (1 << 30):.2f} GiB" if n >= 1 << 30 else f"{n / (1 << 20):.1f} MiB"

        return (f"rank {self.rank}/{self.world}: {size(self.param_bytes)} of parameters, "
                f"{size(self.read_bytes)} read from the checkpoint, peak host RSS {size(self.peak_rss_bytes)}")


def _peak_rss() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # KiB on Linux


def load_model(
    path: str | Path,
    dtype: torch.dtype = torch.float32,
    device: str | torch.device = "cpu",
    latent_norm_eps: float | None = None,
    mtp: bool = True,
    parallel: ParallelState | None = None,
    weight_format: str = "dequant",
) -> Glm5ForCausalLM:
    """Build the model from `path` (a checkpoint directory). mtp=False drops the MTP layer.
    weight_format: "dequant" (FP8 dequantized at load), "fp8" or "fp8_w8a8" (FP8 kept resident).
    `parallel`: load this rank's shards only (the model's `load_stats` says what it cost)."""
    check_weight_format(weight_format)
    parallel = parallel or ParallelState.single()
    path = Path(path)
    overrides = {} if latent_norm_eps is None else {"latent_norm_eps": latent_norm_eps}
    if not mtp:
        overrides["num_nextn_predict_layers"] = 0
    config = ModelConfig.from_pretrained(path, **overrides)
    validate_layout(config, parallel)  # a layout the shapes cannot take fails before anything is read
    shards = _Shards(checkpoint_files(path))
    block = config.weight_block_size or DEFAULT_BLOCK
    with torch.device("meta"):
        model = Glm5ForCausalLM(config, parallel)  # validates the layout before anything is read
        if weight_format != "dequant":
            cuts = fp8_block_misalignments(config, parallel, block)
            if cuts:
                layout = ("DP attention with split extras" if parallel.dp_split_extras else "tensor parallelism")
                other = "dp_extras='replicated'" if parallel.dp_split_extras else "another tensor-parallel size"
                raise CheckpointError(f"weight_format={weight_format!r} with {layout} over {parallel.world} ranks: "
                                      + "; ".join(cuts) + f" (choose {other}, or weight_format='dequant')")
            fp8 = {n for n in shards.files if n + "_scale_inv" in shards.files}
            make_fp8_resident(model, config, block, weight_format, fp8.__contains__)
    meta = model.state_dict()
    expected = {k: tuple(v.shape) for k, v in meta.items()}
    # FP8-resident parameters (e4m3 weights and their fp32 scales) load as stored.
    resident = {k: v.dtype for k, v in meta.items() if v.dtype == torch.float8_e4m3fn or k.endswith("_scale_inv")}
    errors = scale_errors({n: (shards.shape(n), shards.dtype(n)) for n in shards.files}, block)
    plan, plan_errors = _plan(config, expected, shards, parallel, block)
    errors += plan_errors
    if errors:
        raise CheckpointError(f"checkpoint {path} does not match the model config:\n  " + "\n  ".join(errors))
    read_bytes = 0

    def block_shard(weight: str) -> Shard:
        """The scale blocks of `weight`'s shard (aligned: checked before loading)."""
        shard = shard_for(weight, config, parallel)
        if shard.replicated:
            return REPLICATED
        blocks = shard.in_blocks(block[shard.dim], shards.shape(weight)[shard.dim])
        if blocks is None:
            raise CheckpointError(f"{weight}: this rank's shard cuts its {block[0]}x{block[1]} scale blocks")
        return blocks

    def read(name: str, target: torch.dtype, as_stored: bool = False) -> torch.Tensor:
        nonlocal read_bytes
        if as_stored:  # FP8-resident: the e4m3 slice, or its scales' blocks, as stored
            is_scale = name.endswith("_scale_inv")
            t = shards.read(name, block_shard(name.removesuffix("_scale_inv")) if is_scale
                            else shard_for(name, config, parallel))
            if t.dtype != target:
                raise CheckpointError(f"{name}: stored as {t.dtype}, expected {target} for an FP8-resident weight")
            read_bytes += t.numel() * t.element_size()
            return t
        shard = shard_for(name, config, parallel)
        scale = name + "_scale_inv"
        if scale not in shards.files:
            t = shards.read(name, shard)
            if t.dtype in (torch.float8_e4m3fn, torch.float8_e5m2):
                raise CheckpointError(f"{name}: stored as {t.dtype} but {scale} is missing")
            read_bytes += t.numel() * t.element_size()
            return t.to(target)
        full = shards.shape(name)
        scale_shard = shard.in_blocks(block[shard.dim], full[shard.dim]) if not shard.replicated else REPLICATED
        try:
            if scale_shard is None:  # this shard cuts a scale block: dequantize whole, then slice
                w = dequantize_blockwise(shards.get(name), shards.get(scale), block, target)
                read_bytes += w.numel() * shards.get(name).element_size()
                return shard.read(w, full)
            t, s = shards.read(name, shard), shards.read(scale, scale_shard)
            read_bytes += t.numel() * t.element_size() + s.numel() * s.element_size()
            return dequantize_blockwise(t, s, block, target)
        except ValueError as exc:
            raise CheckpointError(f"{scale}: {exc}") from None

    state: dict[str, torch.Tensor] = {}
    for param, source in plan.items():
        target = resident.get(param) or (torch.float32 if _FP32.search(param) else dtype)
        if isinstance(source, str):
            state[param] = read(source, target, param in resident).to(device)
            continue
        packed = torch.empty(expected[param], dtype=target, device=device)
        e0 = model.get_submodule(param.rsplit(".", 1)[0]).e0
        for (e, row0), name in source.items():
            t = read(name, target, param in resident)
            packed[e - e0, row0 : row0 + t.shape[0]] = t.to(device)
        state[param] = packed
    if "lm_head.weight" not in state:  # tie_word_embeddings (checked in _plan)
        state["lm_head.weight"] = state["model.embed_tokens.weight"]
    model.load_state_dict(state, strict=True, assign=True)
    # The model owns the tensors now; dropping these references lets fuse_weights free each
    # original as soon as its re-laid-out replacement exists (peak: one layer's extra copy).
    state.clear()
    model.fuse_weights()
    param_bytes = sum(t.numel() * t.element_size() for t in {id(t): t for t in model.state_dict().values()}.values())
    model.load_stats = LoadStats(parallel.rank, parallel.world, param_bytes, read_bytes, _peak_rss())
    log.info("loaded %s: %s", path, model.load_stats.describe())
    return model.eval()


def _plan(config: ModelConfig, expected: dict[str, tuple[int, ...]], shards: _Shards, parallel: ParallelState,
          block=DEFAULT_BLOCK):
    """Map every model parameter to its checkpoint source; collect every mismatch. Shapes are
    compared as this rank holds them (a sharded tensor's local slice)."""
    plan: dict[str, object] = {}
    errors: list[str] = []
    experts: dict[str, dict] = defaultdict(dict)
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
            local = expected[param][1:]
            want = (local[0] // 2, local[1]) if kind != "down_proj" else local
            full = shards.shape(name)
            got = shard_for(name, config, parallel).local_shape(full)
            if e >= config.n_routed_experts:
                errors.append(f"{name}: unexpected (expert {e} >= n_routed_experts={config.n_routed_experts})")
            elif got != want:
                part = "" if got == full else f" (this rank's part {list(got)})"
                errors.append(f"{name}: checkpoint shape {list(full)}{part} != model shape {list(want)}")
            else:  # another rank's experts are checked for presence and shape, never read
                owned = owns_expert(e, config, parallel)
                experts[param][(e, want[0] if kind == "up_proj" else 0)] = name if owned else None
            continue
        if name not in expected:
            m = _INDEXER.match(name)
            if m and not config.is_full_indexer(int(m.group(1))):
                continue  # IndexShare "shared" layer: checkpoints may ship unused indexer weights
            if _MTP_OPTIONAL.match(name) and int(_MTP_OPTIONAL.match(name).group(1)) >= config.num_hidden_layers:
                continue  # optional copies of the target's embed_tokens / lm_head
            errors.append(f"{name}: unexpected tensor {list(shards.shape(name))}")
            continue
        full = shards.shape(name)
        got = shard_for(name, config, parallel).local_shape(full)
        if got != expected[name]:
            part = "" if got == full else f" (this rank's part {list(got)})"
            errors.append(f"{name}: checkpoint shape {list(full)}{part} != model shape {list(expected[name])}")
        plan[name] = name
    for param, parts in experts.items():
        inter = expected[param][1] // 2  # this rank's part of moe_intermediate_size
        rows = (0, inter) if param.endswith("gate_up_proj") else (0,)
        kinds = {0: "gate_proj", inter: "up_proj"} if len(rows) == 2 else {0: "down_proj"}
        prefix = param.rsplit(".", 1)[0]
        for e in range(config.n_routed_experts):
            for r in rows:
                if (e, r) not in parts:
                    errors.append(f"{prefix}.{e}.{kinds[r]}.weight: missing")
        owned = {key: name for key, name in parts.items() if name is not None}
        plan[param] = owned
        if param + "_scale_inv" in expected:  # FP8-resident experts: pack the scale rows alike
            plan[param + "_scale_inv"] = {(e, r // block[0]): n + "_scale_inv" for (e, r), n in owned.items()}
            errors += [f"{n}_scale_inv: missing (this layer's experts are FP8-resident)" for n in owned.values()
                       if n + "_scale_inv" not in names]  # fmt: skip
    for param, shape in expected.items():
        if param in plan:
            continue
        if param == "lm_head.weight" and config.tie_word_embeddings:
            continue
        errors.append(f"{param}: missing (model shape {list(shape)})")
    return plan, errors
