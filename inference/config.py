"""The GLM-5.x (`glm_moe_dsa`) model configuration, read from a checkpoint's config.json.

Every field the family uses is typed and validated here, and the derived values are computed the
way transformers' `GlmMoeDsaConfig.__post_init__` does (see docs/glm5-model.md §A). Two choices
the reference implementations disagree on are explicit fields:

- `latent_norm_eps`: eps of `q_a_layernorm` / `kv_a_layernorm`. transformers builds them with its
  class default 1e-6; vLLM/SGLang use `rms_norm_eps` (1e-5). We default to the serving engines'
  value (config key `latent_norm_eps` or the `load_model` argument overrides it); the parity tests
  pin both settings against transformers.
- RoPE theta is never defaulted: a config without `rope_parameters.rope_theta` (or a top-level
  `rope_theta`) is rejected, because transformers' silent 10000 is wrong for every GLM-5.x model.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from inference.checkpoint_config import (
    CheckpointConfig, ConfigError, eos_ids, fp8_block_size, indexer_types_by_frequency, typed,
)

SUPPORTED_MODEL_TYPES = ("glm_moe_dsa",)


@dataclass(frozen=True)
class ModelConfig(CheckpointConfig):
    vocab_size: int = 154880
    hidden_size: int = 6144
    intermediate_size: int = 12288
    moe_intermediate_size: int = 2048
    num_hidden_layers: int = 78
    num_attention_heads: int = 64
    q_lora_rank: int = 2048
    kv_lora_rank: int = 512
    qk_nope_head_dim: int = 192
    qk_rope_head_dim: int = 64
    v_head_dim: int = 256
    n_routed_experts: int = 256
    n_shared_experts: int = 1
    num_experts_per_tok: int = 8
    n_group: int = 1
    topk_group: int = 1
    norm_topk_prob: bool = True
    routed_scaling_factor: float = 2.5
    first_k_dense_replace: int = 3
    hidden_act: str = "silu"
    rms_norm_eps: float = 1e-5
    latent_norm_eps: float = 1e-5
    rope_theta: float = 1e6
    rope_type: str = "default"
    rope_interleave: bool = True
    indexer_rope_interleave: bool = True
    max_position_embeddings: int = 202752
    index_topk: int = 2048
    index_n_heads: int = 32
    index_head_dim: int = 128
    index_share_for_mtp_iteration: bool = False
    num_nextn_predict_layers: int = 1
    tie_word_embeddings: bool = False
    eos_token_id: tuple[int, ...] = ()
    pad_token_id: int | None = None
    bos_token_id: int | None = None
    mlp_layer_types: tuple[str, ...] = ()
    indexer_types: tuple[str, ...] = ()
    weight_block_size: tuple[int, int] | None = None
    torch_dtype: str = "bfloat16"
    model_type: str = "glm_moe_dsa"
    extra: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)

    # ---- derived values (qk_head_dim, softmax_scale: CheckpointConfig) -----------------------
    @property
    def latent_dim(self) -> int:
        """Width of one cached MLA row: normalized latent followed by the rotated rope key."""
        return self.kv_lora_rank + self.qk_rope_head_dim

    @property
    def num_mtp_layers(self) -> int:
        return self.num_nextn_predict_layers

    @property
    def num_cache_layers(self) -> int:
        return self.num_hidden_layers + self.num_mtp_layers

    def is_full_indexer(self, layer: int) -> bool:
        """MTP layers (index >= num_hidden_layers) always build a full indexer."""
        return layer >= self.num_hidden_layers or self.indexer_types[layer] == "full"

    def is_moe(self, layer: int) -> bool:
        # The MTP layer is a MoE decoder block in every released checkpoint.
        return layer >= self.num_hidden_layers or self.mlp_layer_types[layer] == "sparse"

    @property
    def indexer_layers(self) -> tuple[int, ...]:
        return tuple(i for i in range(self.num_cache_layers) if self.is_full_indexer(i))

    # ---- construction ---------------------------------------------------------------------
    @classmethod
    def from_dict(cls, data: dict[str, Any], **overrides: Any) -> ModelConfig:
        d = {**data, **overrides}
        model_type = d.get("model_type")
        if model_type not in SUPPORTED_MODEL_TYPES:
            raise ConfigError(
                f"model_type={model_type!r} is not supported: expected one of {SUPPORTED_MODEL_TYPES}"
            )
        if "text_config" in d:
            raise ConfigError("text_config: multimodal configs are not supported (expected a glm_moe_dsa text config)")
        values = cls.typed_fields(d, skip=("indexer_types", "mlp_layer_types", "eos_token_id", "extra"))
        if "num_experts" in d and "n_routed_experts" not in d:  # transformers' BC alias
            values["n_routed_experts"] = typed("num_experts", d["num_experts"], "int")
        values["rope_theta"], values["rope_type"] = _rope(d)
        values["latent_norm_eps"] = typed(
            "latent_norm_eps", d.get("latent_norm_eps", values.get("rms_norm_eps", cls.rms_norm_eps)), "float"
        )
        n_layers = values.get("num_hidden_layers", cls.num_hidden_layers)
        values["indexer_types"] = _indexer_types(d, n_layers)
        values["mlp_layer_types"] = _mlp_layer_types(d, n_layers, values.get("first_k_dense_replace", 3))
        values["eos_token_id"] = eos_ids(d.get("eos_token_id"))
        values["weight_block_size"] = fp8_block_size(d.get("quantization_config"))
        values["extra"] = cls.unknown_keys(d)
        config = cls(**values)
        config.validate()
        return config

    def to_dict(self) -> dict[str, Any]:
        """A config.json dict that transformers' GlmMoeDsaConfig and our from_dict both read."""
        d = asdict(self)
        extra = d.pop("extra")
        d["rope_parameters"] = {"rope_theta": d.pop("rope_theta"), "rope_type": d.pop("rope_type")}
        d["indexer_types"] = list(self.indexer_types)
        d["mlp_layer_types"] = list(self.mlp_layer_types)
        d["eos_token_id"] = list(self.eos_token_id)
        block = d.pop("weight_block_size")
        if block is not None:
            extra = {
                **extra,
                "quantization_config": {
                    "quant_method": "fp8",
                    "fmt": "e4m3",
                    "activation_scheme": "dynamic",
                    "weight_block_size": list(block),
                },
            }
        d["architectures"] = ["GlmMoeDsaForCausalLM"]
        d["qk_head_dim"] = self.qk_head_dim
        d["head_dim"] = self.qk_rope_head_dim
        d["num_key_value_heads"] = self.num_attention_heads
        for k, v in extra.items():
            d.setdefault(k, v)
        return d

    def validate(self) -> None:
        positive = [
            "vocab_size", "hidden_size", "intermediate_size", "moe_intermediate_size", "num_hidden_layers",
            "num_attention_heads", "q_lora_rank", "kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim",
            "v_head_dim", "n_routed_experts", "num_experts_per_tok", "n_group", "topk_group", "index_topk",
            "index_n_heads", "index_head_dim",
        ]  # fmt: skip
        self.check_positive(positive)
        self.check_positive(("rms_norm_eps", "latent_norm_eps", "rope_theta"), integer=False)
        if self.qk_rope_head_dim % 2:
            raise ConfigError(f"qk_rope_head_dim={self.qk_rope_head_dim}: expected an even number (RoPE pairs)")
        if self.index_head_dim < self.qk_rope_head_dim:
            raise ConfigError(
                f"index_head_dim={self.index_head_dim}: expected >= qk_rope_head_dim={self.qk_rope_head_dim} "
                "(the indexer rotates its first qk_rope_head_dim dims)"
            )
        if self.hidden_act != "silu":
            raise ConfigError(f"hidden_act={self.hidden_act!r}: only 'silu' (SwiGLU) is supported")
        if not (self.rope_interleave and self.indexer_rope_interleave):
            raise ConfigError(
                f"rope_interleave={self.rope_interleave}, indexer_rope_interleave={self.indexer_rope_interleave}: "
                "GLM-5.x uses interleaved RoPE in both MLA and the indexer (expected true)"
            )
        if self.n_routed_experts % self.n_group:
            raise ConfigError(
                f"n_group={self.n_group}: expected a divisor of n_routed_experts={self.n_routed_experts}"
            )
        if self.n_group > 1 and self.n_routed_experts // self.n_group < 2:
            raise ConfigError(f"n_group={self.n_group}: group scoring needs at least 2 experts per group")
        if not 1 <= self.topk_group <= self.n_group:
            raise ConfigError(f"topk_group={self.topk_group}: expected 1..n_group={self.n_group}")
        selectable = self.topk_group * (self.n_routed_experts // self.n_group)
        if self.num_experts_per_tok > selectable:
            raise ConfigError(
                f"num_experts_per_tok={self.num_experts_per_tok}: expected <= {selectable} "
                f"(topk_group x experts per group)"
            )
        if self.indexer_types[0] != "full":
            raise ConfigError(
                f"indexer_types[0]={self.indexer_types[0]!r}: layer 0 must be 'full' "
                "(a shared layer reuses the top-k of an earlier full layer)"
            )
        if self.num_nextn_predict_layers not in (0, 1):
            raise ConfigError(
                f"num_nextn_predict_layers={self.num_nextn_predict_layers}: expected 0 or 1 (one MTP layer)"
            )
        unsupported = {
            "scoring_func": ("sigmoid",), "topk_method": ("noaux_tc",), "moe_router_dtype": ("float32",),
            "attention_bias": (False,), "mlp_bias": (False,),
        }  # fmt: skip
        for name, allowed in unsupported.items():
            if name in self.extra and self.extra[name] not in allowed:
                raise ConfigError(f"{name}={self.extra[name]!r}: only {allowed[0]!r} is supported by this model")
        if self.weight_block_size is not None and any(b <= 0 for b in self.weight_block_size):
            raise ConfigError(f"quantization_config.weight_block_size={self.weight_block_size}: expected positive")

    def summary(self) -> dict[str, Any]:
        n_full = sum(1 for t in self.indexer_types if t == "full")
        return {
            "layers": self.num_hidden_layers,
            "mtp_layers": self.num_mtp_layers,
            "hidden_size": self.hidden_size,
            "heads": self.num_attention_heads,
            "qk_head_dim": self.qk_head_dim,
            "v_head_dim": self.v_head_dim,
            "kv_lora_rank": self.kv_lora_rank,
            "dense_layers": sum(1 for t in self.mlp_layer_types if t == "dense"),
            "moe_layers": sum(1 for t in self.mlp_layer_types if t == "sparse"),
            "experts": f"{self.n_routed_experts} routed (top-{self.num_experts_per_tok}) + {self.n_shared_experts} shared",
            "indexer": f"{n_full} full / {self.num_hidden_layers - n_full} shared, top-{self.index_topk}",
            "rope_theta": self.rope_theta,
            "vocab_size": self.vocab_size,
            "fp8_block": self.weight_block_size,
        }


def _rope(d: dict[str, Any]) -> tuple[float, str]:
    params = d.get("rope_parameters") or d.get("rope_scaling") or {}
    if not isinstance(params, dict):
        raise ConfigError(f"rope_parameters={params!r}: expected a dict with rope_theta and rope_type")
    theta = params.get("rope_theta", d.get("rope_theta"))
    if theta is None:
        raise ConfigError(
            "rope_parameters.rope_theta: missing (GLM-5/5.1 use 1e6, GLM-5.2/5.3 use 8e6; "
            "refusing transformers' silent default of 10000)"
        )
    rope_type = params.get("rope_type", params.get("type", "default"))
    if rope_type != "default":
        raise ConfigError(f"rope_parameters.rope_type={rope_type!r}: only 'default' RoPE is supported")
    return typed("rope_theta", theta, "float"), rope_type


def _indexer_types(d: dict[str, Any], n_layers: int) -> tuple[str, ...]:
    """docs/glm5-model.md §A.2: explicit list, else the F/S pattern, else freq/offset."""
    if d.get("indexer_types") is not None:
        types, source = list(d["indexer_types"]), "indexer_types"
    elif d.get("index_topk_pattern") is not None:
        pattern, source = d["index_topk_pattern"], "index_topk_pattern"
        if isinstance(pattern, str):
            bad = sorted(set(pattern) - {"F", "S"})
            if bad:
                raise ConfigError(f"index_topk_pattern={pattern!r}: unexpected characters {bad}, expected F or S")
            types = [{"F": "full", "S": "shared"}[c] for c in pattern]
        else:
            types = list(pattern)
    else:
        freq = max(typed("index_topk_freq", d.get("index_topk_freq") or 1, "int"), 1)
        offset = typed("index_skip_topk_offset", d.get("index_skip_topk_offset", 2), "int")
        return indexer_types_by_frequency(freq, offset, n_layers)
    if len(types) != n_layers:
        raise ConfigError(f"{source}: {len(types)} entries, expected num_hidden_layers={n_layers}")
    bad = sorted({t for t in types if t not in ("full", "shared")})
    if bad:
        raise ConfigError(f"{source}: unexpected values {bad}, expected 'full' or 'shared'")
    return tuple(types)


def _mlp_layer_types(d: dict[str, Any], n_layers: int, first_k_dense: int) -> tuple[str, ...]:
    types = d.get("mlp_layer_types")
    if types is None:
        n_dense = min(first_k_dense, n_layers)
        return ("dense",) * n_dense + ("sparse",) * (n_layers - n_dense)
    if len(types) != n_layers:
        raise ConfigError(f"mlp_layer_types: {len(types)} entries, expected num_hidden_layers={n_layers}")
    bad = sorted({t for t in types if t not in ("dense", "sparse")})
    if bad:
        raise ConfigError(f"mlp_layer_types: unexpected values {bad}, expected 'dense' or 'sparse'")
    return tuple(types)
