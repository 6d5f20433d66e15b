"""How a checkpoint fits a node: weights per rank, KV bytes per token, KV tokens, 100K sessions.

Works from config.json alone (no weights), so it plans GLM-5.3 on 8×H200 anywhere. Weights per
rank come from the model's own parameter shapes (built once on the meta device) cut by the shard
rules of inference/parallel/shard.py for the layout's ParallelState, the rules the layers allocate
from and the loader checks, so the plan and the shard rules cannot disagree. One build sizes
every layout of a plan (whole, TP rank, DP-attention rank). Bytes follow the FP8 release:
e4m3 values plus fp32 128×128 block scales for the quantized projections and experts, fp32 router
(and its bias, the indexer's weights_proj), everything else in the model dtype.

KV budget per rank = GPU memory × fraction − weights − a runtime reserve (activations, the
absorbed attention's bf16 kv_b copy, NCCL and top-k buffers, CUDA graphs). Under tensor
parallelism every rank holds every sequence's latent cache (MLA has one latent head), so the
node holds what one rank holds. Under DP attention each rank holds its own sequences (node =
ranks × rank), in two layouts of the extras (embedding, LM head, dense and shared MLPs): split
over the ranks (the engine's default) or replicated. ../shared/docs/scaleout.md §3 has the same
arithmetic by hand.
"""

from __future__ import annotations

import math
import re
from dataclasses import asdict, dataclass

import torch

from inference.config import ModelConfig
from inference.kv_cache import kv_bytes_per_token
from inference.parallel.shard import fp8_block_misalignments, shard_for
from inference.parallel.state import ParallelState

GIB = 1 << 30
SESSION_TOKENS = 100_000
_QUANTIZED = re.compile(
    r"(self_attn\.(q_a_proj|q_b_proj|kv_a_proj_with_mqa|kv_b_proj|o_proj|indexer\.wq_b|indexer\.wk)\.weight"
    r"|mlp\.(shared_experts\.)?(gate_proj|up_proj|down_proj)\.weight|experts\.(gate_up_proj|down_proj))$"
)
_PACKED_EXPERTS = re.compile(r"mlp\.experts\.(gate_up_proj|down_proj)$")  # [E, 2I, H] and [E, H, I]
_FP32 = re.compile(r"(mlp\.gate\.weight|e_score_correction_bias|indexer\.weights_proj\.weight)$")
_UNITS = {"": 1, "b": 1, "kib": 1 << 10, "mib": 1 << 20, "gib": 1 << 30, "tib": 1 << 40,
          "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12}


def parse_bytes(text: str) -> int:
    """'141GiB', '143771MiB', '150GB', '1.5e11' -> bytes."""
    m = re.fullmatch(r"\s*([0-9.eE+]+)\s*([A-Za-z]*)\s*", text)
    if not m or m.group(2).lower() not in _UNITS:
        raise ValueError(f"{text!r}: expected a size like 141GiB, 143771MiB or 150GB")
    return int(float(m.group(1)) * _UNITS[m.group(2).lower()])


@dataclass(frozen=True)
class DPLayout:
    """DP attention + EP over every GPU, one layout of the extras. A session's KV lives on one
    rank, so sessions are counted whole per rank."""

    extras: str  # "split" (embed/head by vocab, dense/shared MLPs by intermediate size) or "replicated"
    weights_bytes_per_rank: int
    reserve_bytes: int
    kv_tokens_per_rank: int
    kv_tokens_per_node: int  # every rank of the plan's GPUs (one node for GLM-5.3 on 8xH200)
    sessions_100k: int


@dataclass(frozen=True)
class MemoryPlan:
    layout: str
    gpus: int
    tp: int
    ep: int
    gpu_memory_bytes: int
    memory_fraction: float
    reserve_bytes: int
    weight_format: str
    kv_cache_dtype: str
    parameters: int
    weights_bytes_total: int
    weights_bytes_per_rank: int
    kv_bytes_per_token: int
    kv_bytes_per_rank: int
    kv_tokens: int  # per rank, and per node under TP (every rank holds every sequence)
    sessions_100k: int
    # DP-attention + EP on the same GPUs (each rank owns whole sequences: node KV = ranks x rank KV),
    # split extras first (the engine's default), then replicated; empty unless asked for.
    dp_layouts: tuple[DPLayout, ...] = ()

    def to_dict(self) -> dict:
        return asdict(self)

    def dp_layout(self, extras: str = "split") -> DPLayout:
        for layout in self.dp_layouts:
            if layout.extras == extras:
                return layout
        raise KeyError(f"no DP-attention layout with {extras!r} extras in this plan (planned: "
                       f"{[d.extras for d in self.dp_layouts]})")

    def describe(self) -> str:
        g = lambda b: f"{b / GIB:,.1f} GiB"  # noqa: E731
        return "\n".join([
            f"layout            {self.layout} on {self.gpus} GPUs of {g(self.gpu_memory_bytes)} "
            f"(memory fraction {self.memory_fraction}, reserve {g(self.reserve_bytes)} per rank)",
            f"parameters        {self.parameters:,} ({g(self.weights_bytes_total)} as {self.weight_format})",
            f"weights per rank  {g(self.weights_bytes_per_rank)}",
            f"KV per token      {self.kv_bytes_per_token:,} B ({self.kv_cache_dtype}; every layer, MTP included)",
            f"KV per rank       {g(self.kv_bytes_per_rank)} = {self.kv_tokens:,} tokens "
            "(replicated across TP ranks: also the node's total)",
            f"100K sessions     {self.sessions_100k} at once ({SESSION_TOKENS * self.kv_bytes_per_token / GIB:.2f} GiB each)",
        ] + self._describe_dp(g))

    def _describe_dp(self, g) -> list[str]:
        if not self.dp_layouts:
            return []
        lines = [f"DP-attention + EP{self.gpus}: every head on every rank over its own sessions, experts split, "
                 f"reserve {g(self.dp_layouts[0].reserve_bytes)} per rank (gathered buffers)"]
        names = {"split": "extras split (default: embed/head by vocab, dense and shared MLPs by intermediate size)",
                 "replicated": "extras replicated (embed/head, dense and shared MLPs whole on every rank)"}
        tp_tokens = self.kv_tokens * (self.gpus // self.tp)  # every TP replica on these GPUs
        for d in self.dp_layouts:
            lines += [
                f"  {names.get(d.extras, d.extras)}",
                f"    weights per rank  {g(d.weights_bytes_per_rank)}",
                f"    KV tokens         {d.kv_tokens_per_rank:,} per rank, {d.kv_tokens_per_node:,} on the "
                f"{self.gpus} GPUs ({d.kv_tokens_per_node / max(1, tp_tokens):.2f}x TP{self.tp}'s {tp_tokens:,})",
                f"    100K sessions     {d.sessions_100k} at once ({d.sessions_100k // self.gpus} whole sessions per "
                f"rank), vs {self.sessions_100k} with TP{self.tp}",
            ]
        return lines


def _param_bytes(name: str, shape: tuple[int, ...], fp8: bool, block: tuple[int, int], itemsize: int) -> int:
    numel = math.prod(shape)
    if _FP32.search(name):
        return numel * 4
    if fp8 and _QUANTIZED.search(name):
        rows, cols = shape[-2], shape[-1]
        matrices = numel // (rows * cols)
        return numel + matrices * math.ceil(rows / block[0]) * math.ceil(cols / block[1]) * 4
    return numel * itemsize


def model_shapes(config: ModelConfig) -> dict[str, tuple[int, ...]]:
    """Every parameter of the whole model and its shape, from one build on the meta device (no
    memory, ~0.3 s for GLM-5.3): the one build every layout of a plan is sized from."""
    from inference.model import Glm5ForCausalLM

    with torch.device("meta"):
        return {k: tuple(v.shape) for k, v in Glm5ForCausalLM(config).state_dict().items()}


def rank_shape(name: str, full: tuple[int, ...], config: ModelConfig, state: ParallelState) -> tuple[int, ...]:
    """The shape of parameter `name` (whole: `full`) on rank `state`: shard.py's rule for its name,
    and for the packed experts [E, 2I | H, H | I] the ParallelState helpers the MoE layer allocates
    them from. tests/inference/parallel/test_memory_plan.py checks this against sharded meta models."""
    kind = _PACKED_EXPERTS.search(name)
    if kind is None:
        return shard_for(name, config, state).local_shape(full)
    experts = state.experts(full[0])[1]
    inter = state.expert_intermediate(config.moe_intermediate_size)[1]
    return (experts, 2 * inter, full[2]) if kind.group(1) == "gate_up_proj" else (experts, full[1], inter)


def weight_bytes(shapes: dict[str, tuple[int, ...]], config: ModelConfig, state: ParallelState, fp8: bool = True,
                 dtype: torch.dtype = torch.bfloat16) -> int:
    """Bytes one rank of layout `state` holds (rank 0; the others differ by vocab padding at most)."""
    block = config.weight_block_size or (128, 128)
    itemsize = torch.tensor([], dtype=dtype).element_size()
    return sum(_param_bytes(k, rank_shape(k, s, config, state), fp8, block, itemsize) for k, s in shapes.items())


def plan(config: ModelConfig, gpus: int, gpu_memory_bytes: int, tp: int | None = None, ep: int | None = None,
         kv_cache_dtype: str = "fp8", weight_format: str | None = None, memory_fraction: float = 0.90,
         reserve_bytes: int = 6 * GIB, dp_attention: bool = False, dp_reserve_bytes: int = 8 * GIB) -> MemoryPlan:
    """dp_attention: also plan DP-attention + EP over all `gpus`, with split and with replicated
    extras (its reserve is larger: every rank holds the inputs gathered from all ranks). A layout
    whose FP8 shards would cut a scale block is refused, naming it."""
    tp = tp or gpus
    ep = ep or tp
    if gpus % tp:
        raise ValueError(f"--tp {tp} does not divide --gpus {gpus}")
    if not 0 < memory_fraction <= 1:
        raise ValueError(f"memory fraction {memory_fraction}: expected a value in (0, 1]")
    fp8 = (weight_format or ("fp8" if config.weight_block_size else "bf16")) == "fp8"
    if fp8 and tp > 1:
        _refuse_cut_blocks(config, f"TP{tp}/EP{ep}", lambda r: ParallelState(tp, r, ep))
    shapes = model_shapes(config)
    params = sum(math.prod(s) for s in shapes.values())
    whole = weight_bytes(shapes, config, ParallelState.single(), fp8)
    per_rank = weight_bytes(shapes, config, ParallelState(tp, 0, ep), fp8) if tp > 1 else whole
    kv_token = kv_bytes_per_token(config, torch.bfloat16, kv_cache_dtype)
    kv_rank = max(0, int(gpu_memory_bytes * memory_fraction) - per_rank - reserve_bytes)
    tokens = kv_rank // kv_token
    layout = f"TP{tp}" + (f" + EP{ep}" if ep > 1 else "") + (f" × {gpus // tp} replicas" if gpus > tp else "")
    dp = []
    for extras in ("split", "replicated") if dp_attention else ():
        # SGLang --enable-dp-attention (with --enable-dp-lm-head and moe_dense_tp_size for split
        # extras), vLLM --data-parallel-size N --enable-expert-parallel: the routed experts split
        # over every GPU, the attention replicated.
        state = lambda r: ParallelState(gpus, r, gpus, attention_dp=True, split_extras=extras == "split")  # noqa: E731
        if fp8:
            _refuse_cut_blocks(config, f"DP{gpus} with {extras} extras", state)
        dp_weights = weight_bytes(shapes, config, state(0), fp8)
        dp_tokens = max(0, int(gpu_memory_bytes * memory_fraction) - dp_weights - dp_reserve_bytes) // kv_token
        # A session lives on one rank (its KV pages are that rank's): whole sessions per rank.
        dp.append(DPLayout(extras, dp_weights, dp_reserve_bytes, dp_tokens, dp_tokens * gpus,
                           dp_tokens // SESSION_TOKENS * gpus))
    return MemoryPlan(layout, gpus, tp, ep, gpu_memory_bytes, memory_fraction, reserve_bytes,
                      "fp8" if fp8 else "bf16", kv_cache_dtype, params, whole, per_rank, kv_token, kv_rank,
                      tokens, tokens // SESSION_TOKENS * (gpus // tp), tuple(dp))


def _refuse_cut_blocks(config: ModelConfig, name: str, state_of) -> None:
    """FP8-resident weights keep whole 128x128 scale blocks: a layout whose shards would cut one
    is refused, naming the layout and the tensors."""
    block = config.weight_block_size or (128, 128)
    ranks = state_of(0).world
    cuts = [c for r in range(ranks) for c in fp8_block_misalignments(config, state_of(r), block)]
    if cuts:
        raise ValueError(f"{name} cannot keep the weights in FP8: " + "; ".join(cuts[:3]))
