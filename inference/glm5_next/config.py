"""The GLM-5.3-Flash (`glm5_next`) text configuration, read from a checkpoint's config.json.

Mirrors transformers' `Glm5NextTextConfig.__post_init__` (layer_types, mlp_layer_types,
indexer_types, the `linear_attn_config` alias, head_dim forced to qk_rope_head_dim) and its
`validate_architecture`. Every field of that class is either used by the model or listed in
`_INFERENCE_NEUTRAL` (training-only knobs) / refused with a ConfigError naming it.

A multimodal config (`model_type: glm5_next` with `text_config`) is accepted: the text fields
come from `text_config`, the vision fields are kept raw in `vision_config` (the vision tower is
not implemented yet; see README).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from inference.checkpoint_config import (
    CheckpointConfig, ConfigError, eos_ids, fp8_block_size, indexer_types_by_frequency, typed,
)

# transformers' fields with no effect on inference outputs (training / init / HF plumbing), accepted
# and unused; head_dim is derived (transformers overwrites it with qk_rope_head_dim, i.e. 0).
INFERENCE_NEUTRAL = frozenset({"initializer_range", "router_aux_loss_coef", "attention_dropout", "use_cache", "head_dim"})


@dataclass(frozen=True)
class Glm5NextTextConfig(CheckpointConfig):
    vocab_size: int = 154880
    hidden_size: int = 4096
    intermediate_size: int = 12288
    moe_intermediate_size: int = 2048
    num_hidden_layers: int = 45
    num_attention_heads: int = 64
    num_key_value_heads: int = 64
    n_shared_experts: int = 1
    n_routed_experts: int = 288
    output_router_logits: bool = False
    routed_scaling_factor: float = 2.5
    kv_lora_rank: int = 512
    q_lora_rank: int = 1536
    qk_rope_head_dim: int = 0
    v_head_dim: int = 256
    qk_nope_head_dim: int = 256
    n_group: int = 1
    topk_group: int = 1
    num_experts_per_tok: int = 8
    norm_topk_prob: bool = True
    hidden_act: str = "silu"
    max_position_embeddings: int = 1048576
    rms_norm_eps: float = 1e-5
    pad_token_id: int | None = 154820
    bos_token_id: int | None = None
    eos_token_id: tuple[int, ...] = ()
    tie_word_embeddings: bool = False
    attention_bias: bool = False
    index_topk: int = 2048
    index_head_dim: int = 128
    index_n_heads: int = 32
    swiglu_limit: float = 10.0
    linear_head_dim: int = 128
    linear_num_heads: int = 64
    linear_conv_kernel_dim: int = 4
    linear_lower_bound: float | None = -5.0
    hc_mult: int = 4
    hc_eps: float = 1e-6
    hc_sinkhorn_iters: int = 20
    index_kpool: int = 16
    index_kpool_always_select_tail: bool = True
    layer_types: tuple[str, ...] = ()
    mlp_layer_types: tuple[str, ...] = ()
    indexer_types: tuple[str, ...] = ()
    weight_block_size: tuple[int, int] | None = None
    # top-level (multimodal) fields: placeholder ids the vision tower's embeddings replace
    image_token_id: int = 154854
    video_start_token_id: int = 154832
    video_end_token_id: int = 154833
    vision_config: dict[str, Any] | None = field(default=None, compare=False, repr=False)
    extra: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)

    # ---- derived (qk_head_dim, softmax_scale: CheckpointConfig) -------------------------------
    @property
    def linear_dim(self) -> int:
        return self.linear_num_heads * self.linear_head_dim

    def is_kda(self, layer: int) -> bool:
        return self.layer_types[layer] == "linear_attention"

    def is_moe(self, layer: int) -> bool:
        return self.mlp_layer_types[layer] == "sparse"

    def is_full_indexer(self, layer: int) -> bool:
        return self.indexer_types[layer] == "full"

    @property
    def kda_state_bytes_per_sequence(self) -> int:
        """fp32 recurrent state + conv window (stored fp32) over every KDA layer."""
        per_layer = self.linear_num_heads * self.linear_head_dim**2 + 3 * self.linear_dim * (self.linear_conv_kernel_dim - 1)
        return 4 * per_layer * sum(1 for t in self.layer_types if t == "linear_attention")

    # ---- construction (from_pretrained: CheckpointConfig) ---------------------------------------
    @classmethod
    def from_dict(cls, data: dict[str, Any], **overrides: Any) -> Glm5NextTextConfig:
        top = dict(data)
        model_type = top.get("model_type")
        if model_type not in ("glm5_next", "glm5_next_text"):
            raise ConfigError(f"model_type={model_type!r}: expected 'glm5_next' or 'glm5_next_text'")
        text = top.get("text_config")
        d = dict(text) if isinstance(text, dict) else {k: v for k, v in top.items() if k != "vision_config"}
        if text is not None and not isinstance(text, dict):
            raise ConfigError(f"text_config={text!r}: expected a dict")
        d.update(overrides)
        if (linear := d.get("linear_attn_config")) is not None:  # transformers' dict alias
            if not isinstance(linear, dict):
                raise ConfigError(f"linear_attn_config={linear!r}: expected a dict")
            d.setdefault("linear_head_dim", linear.get("head_dim", cls.linear_head_dim))
            d.setdefault("linear_num_heads", linear.get("num_heads", cls.linear_num_heads))
            d.setdefault("linear_conv_kernel_dim", linear.get("short_conv_kernel_size", cls.linear_conv_kernel_dim))
            bound = linear.get("gate_lower_bound", d.get("linear_lower_bound", cls.linear_lower_bound))
            if linear.get("safe_gate", True) and bound is None:
                bound = -5.0
            d["linear_lower_bound"] = bound
        values = cls.typed_fields(d, skip=("layer_types", "mlp_layer_types", "indexer_types", "eos_token_id",
                                           "vision_config", "extra"), readers={"linear_lower_bound": _lower_bound})
        if "num_local_experts" in d and "n_routed_experts" not in d:  # attribute_map alias
            values["n_routed_experts"] = typed("num_local_experts", d["num_local_experts"], "int")
        n = values.get("num_hidden_layers", cls.num_hidden_layers)
        values["layer_types"] = _layer_types(d.get("layer_types"), n)
        values["mlp_layer_types"] = _choices("mlp_layer_types", d.get("mlp_layer_types"), n, ("dense", "sparse"),
                                             ("dense",) * min(3, n) + ("sparse",) * max(n - 3, 0))
        values["indexer_types"] = _indexer_types(d, n)
        values["eos_token_id"] = eos_ids(d.get("eos_token_id"))
        values["weight_block_size"] = fp8_block_size(top.get("quantization_config") or d.get("quantization_config"))
        values["vision_config"] = top.get("vision_config")
        for name in ("image_token_id", "video_start_token_id", "video_end_token_id"):
            if name in top:
                values[name] = typed(name, top[name], "int")
        values["extra"] = cls.unknown_keys(d)
        config = cls(**values)
        config.validate()
        return config

    def validate(self) -> None:
        positive = ["vocab_size", "hidden_size", "intermediate_size", "moe_intermediate_size", "num_hidden_layers",
                    "num_attention_heads", "n_routed_experts", "kv_lora_rank", "q_lora_rank", "v_head_dim",
                    "qk_nope_head_dim", "n_group", "topk_group", "num_experts_per_tok", "index_topk", "index_head_dim",
                    "index_n_heads", "linear_head_dim", "linear_num_heads", "linear_conv_kernel_dim", "hc_mult",
                    "hc_sinkhorn_iters", "index_kpool", "max_position_embeddings"]  # fmt: skip
        self.check_positive(positive)
        if self.n_shared_experts < 0:
            raise ConfigError(f"n_shared_experts={self.n_shared_experts}: expected >= 0")
        self.check_positive(("rms_norm_eps", "hc_eps", "swiglu_limit"), integer=False)
        if self.num_key_value_heads != self.num_attention_heads:
            raise ConfigError(f"num_key_value_heads={self.num_key_value_heads}: must equal "
                              f"num_attention_heads={self.num_attention_heads} (MLA)")
        if self.qk_rope_head_dim != 0:
            raise ConfigError(f"qk_rope_head_dim={self.qk_rope_head_dim}: GLM-5.3-Flash is NoPE (expected 0)")
        if self.index_topk % self.index_kpool:
            raise ConfigError(f"index_topk={self.index_topk}: must be divisible by index_kpool={self.index_kpool}")
        if self.hidden_act != "silu":
            raise ConfigError(f"hidden_act={self.hidden_act!r}: only 'silu' (SwiGLU) is supported")
        if self.output_router_logits:
            raise ConfigError("output_router_logits=True: router logits are a training output; expected false")
        if self.linear_lower_bound is not None and not self.linear_lower_bound < 0:
            raise ConfigError(f"linear_lower_bound={self.linear_lower_bound}: expected a negative number or null")
        if self.n_routed_experts % self.n_group:
            raise ConfigError(f"n_group={self.n_group}: expected a divisor of n_routed_experts={self.n_routed_experts}")
        if self.n_routed_experts // self.n_group < 2:
            raise ConfigError(f"n_group={self.n_group}: group scoring needs at least 2 experts per group")
        if not 1 <= self.topk_group <= self.n_group:
            raise ConfigError(f"topk_group={self.topk_group}: expected 1..n_group={self.n_group}")
        if self.num_experts_per_tok > self.topk_group * (self.n_routed_experts // self.n_group):
            raise ConfigError(f"num_experts_per_tok={self.num_experts_per_tok}: more than the selectable experts")
        for i, kind in enumerate(self.indexer_types):
            if kind != "shared" or self.is_kda(i):
                continue
            # transformers hands a selection only from a full DSA layer to the layer right after it.
            if i == 0 or self.is_kda(i - 1) or self.indexer_types[i - 1] != "full":
                raise ConfigError(f"indexer_types[{i}]='shared': a shared DSA layer must directly follow a full "
                                  "DSA layer (transformers passes the selection only one layer on)")
        for name in ("tie_word_embeddings",):
            typed(name, getattr(self, name), "bool")
        unknown = sorted(k for k in self.extra if k in _REFUSED)
        if unknown:
            raise ConfigError(f"{unknown[0]}={self.extra[unknown[0]]!r}: not supported by this model")

    def summary(self) -> dict[str, Any]:
        kda = sum(1 for t in self.layer_types if t == "linear_attention")
        return {
            "layers": self.num_hidden_layers, "kda_layers": kda, "dsa_layers": self.num_hidden_layers - kda,
            "hidden_size": self.hidden_size, "experts": f"{self.n_routed_experts} routed (top-{self.num_experts_per_tok})"
            f" + {self.n_shared_experts} shared", "hc_mult": self.hc_mult, "index": f"top-{self.index_topk}, "
            f"kpool {self.index_kpool}", "kda_state_bytes_per_sequence": self.kda_state_bytes_per_sequence,
        }  # fmt: skip


# Keys that change the math in ways this model does not implement.
_REFUSED = {"rope_scaling"}


def _lower_bound(value: Any) -> float | None:
    if value is None:
        return None
    return typed("linear_lower_bound", value, "float")


def _choices(name: str, given: Any, n: int, allowed: tuple[str, ...], default: tuple[str, ...]) -> tuple[str, ...]:
    if given is None:
        return default
    if not isinstance(given, list) or len(given) != n:
        raise ConfigError(f"{name}: expected a list of num_hidden_layers={n} entries, got {given!r}")
    bad = sorted({t for t in given if t not in allowed})
    if bad:
        raise ConfigError(f"{name}: unexpected values {bad}, expected one of {list(allowed)}")
    return tuple(given)


def _layer_types(given: Any, n: int) -> tuple[str, ...]:
    default = tuple("indexed_attention" if i % 4 == 3 else "linear_attention" for i in range(n))
    if given is not None and isinstance(given, list):
        given = ["indexed_attention" if t == "full_attention" else t for t in given]  # transformers' alias
    return _choices("layer_types", given, n, ("linear_attention", "indexed_attention"), default)


def _indexer_types(d: dict[str, Any], n: int) -> tuple[str, ...]:
    if d.get("indexer_types") is not None:
        return _choices("indexer_types", d["indexer_types"], n, ("full", "shared"), ())
    pattern = d.get("index_topk_pattern")
    if pattern is not None:
        types = [{"F": "full", "S": "shared"}.get(c, c) for c in pattern] if isinstance(pattern, str) else list(pattern)
        return _choices("index_topk_pattern", types, n, ("full", "shared"), ())
    freq = max(typed("index_topk_freq", d.get("index_topk_freq", 1), "int"), 1)
    offset = typed("index_skip_topk_offset", d.get("index_skip_topk_offset", 2), "int")
    return indexer_types_by_frequency(freq, offset, n)

