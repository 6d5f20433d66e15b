"""Engine configuration, validated at the edge."""

from __future__ import annotations

from typing import Optional

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from inference.parallel.settings import ParallelConfig

REASONING_LEVELS = ("none", "low", "medium", "high", "max")

# Thinking-token budgets per reasoning effort; None means unlimited.
DEFAULT_REASONING_BUDGETS: dict[str, Optional[int]] = {
    "none": 0,
    "low": 512,
    "medium": 2048,
    "high": 8192,
    "max": None,
}


class EngineConfig(BaseModel):
    """Everything that sizes and tunes one engine instance.

    The KV budget is given in tokens or bytes (bytes win when both are set); it is rounded down
    to whole pages. `host_budget_tokens=0` turns the host tier off, `session_ttl_s=0` turns
    session retention off: both together give a plain LRU prefix cache.
    """

    model_config = ConfigDict(extra="forbid")

    dtype: str = "bfloat16"
    device: str = "cpu"
    # "auto": the KV cache holds the model dtype; "fp8": the serving engines' FP8 layouts
    # (fp8_ds_mla latent + FP8 indexer keys, inference/kv_formats.py), ~0.56x the bf16 bytes.
    kv_cache_dtype: str = "auto"
    # Decode graphs (inference/engine/decode_graphs.py): decode steps, MTP verification and MTP
    # draft passes of up to `graph_max_batch` sequences replayed from fixed buffers: CUDA graphs on
    # CUDA (captured at start-up), torch.compile on CPU (compiled at start-up: tens of seconds,
    # cached on disk by inductor). None: on for CUDA, off on CPU. Off, the same steps run eagerly
    # through the same buffers. Prefill and mixed batches always run eagerly.
    decode_graphs: Optional[bool] = None
    # The earlier name of decode_graphs=True (CPU torch.compile of decode steps); still accepted.
    compile_decode: bool = False
    graph_max_batch: int = Field(default=64, ge=1)
    # Overlap scheduling (inference/engine/overlap.py): while a decode step runs on the device the
    # host processes the previous step's tokens and launches the next. None: on for CUDA, off on
    # CPU (where the forward then runs on a worker thread). Not with MTP speculation or several ranks.
    overlap_schedule: Optional[bool] = None
    # How FP8 checkpoint weights live in memory (inference/layers/fp8_linear.py): "dequant" expands
    # them to `dtype` at load; "fp8" keeps e4m3 + block scales and dequantizes per call (W8A16);
    # "fp8_w8a8" keeps them and runs the block-scaled FP8 GEMM. "auto": dequant on CPU, fp8_w8a8
    # on CUDA. Checkpoints without FP8 weights load the same way under every value.
    weight_format: str = "auto"
    kv_budget_tokens: Optional[int] = Field(default=None, ge=1)
    kv_budget_bytes: Optional[int] = Field(default=None, ge=1)
    page_size: int = Field(default=64, ge=1)
    host_budget_tokens: int = Field(default=0, ge=0)
    max_batch_tokens: int = Field(default=2048, ge=1)
    chunk_size: int = Field(default=512, ge=1)
    max_running: int = Field(default=64, ge=1)
    num_speculative_tokens: int = Field(default=0, ge=0, le=8)
    enable_prefix_cache: bool = True
    session_ttl_s: float = Field(default=300.0, ge=0.0)
    # Models with recurrent layers (GLM-5.3-Flash's KDA): a prefix hit also needs the layers'
    # state at the matched position, kept as snapshots (inference/engine/state_snapshots.py).
    # This share of the KV budget's bytes (and of the host budget's) holds them; 0 turns prefix
    # hits off for such models. Ignored by models without recurrent state.
    state_snapshot_fraction: float = Field(default=0.25, ge=0.0, lt=1.0)
    reasoning_budgets: dict[str, Optional[int]] = Field(default_factory=lambda: dict(DEFAULT_REASONING_BUDGETS))
    think_start_id: Optional[int] = None
    think_end_id: Optional[int] = None
    # eps of the q/kv latent norms; None = the checkpoint's (see inference.config). transformers
    # uses 1e-6 there, so parity runs against it pass 1e-6.
    latent_norm_eps: Optional[float] = None
    # Waiting requests are reordered by cached-prefix length, but one that has waited this many
    # steps goes first, so a long-prefix stream cannot starve a cold request.
    max_wait_steps: int = Field(default=32, ge=1)
    # Tensor / expert parallelism over several processes (inference/parallel/); one by default.
    parallel: ParallelConfig = Field(default_factory=ParallelConfig)
    # Vision checkpoints: the largest encoded image a request may carry (bytes, before decoding).
    max_image_bytes: int = Field(default=20 << 20, ge=1)

    @field_validator("dtype")
    @classmethod
    def _known_dtype(cls, v: str) -> str:
        if v not in ("float32", "bfloat16", "float16"):
            raise ValueError(f"dtype must be float32, bfloat16 or float16, got {v!r}")
        return v

    @field_validator("weight_format")
    @classmethod
    def _known_weight_format(cls, v: str) -> str:
        if v not in ("auto", "dequant", "fp8", "fp8_w8a8"):
            raise ValueError(f"weight_format must be 'auto', 'dequant', 'fp8' or 'fp8_w8a8', got {v!r}")
        return v

    @model_validator(mode="after")
    def _graphs_named_once(self) -> "EngineConfig":
        if self.compile_decode and self.decode_graphs is False:
            raise ValueError("compile_decode=True and decode_graphs=False contradict each other "
                             "(compile_decode is the earlier name of decode_graphs=True)")
        if (self.decode_graphs or self.compile_decode) and self.parallel.attention_dp:
            raise ValueError("decode_graphs=True with parallel.attention_dp=True: DP attention steps through the "
                             "general forward (each step's token exchange is sized on the host); set "
                             "decode_graphs to False or None")
        return self

    @model_validator(mode="after")
    def _overlap_supported(self) -> "EngineConfig":
        if self.overlap_schedule and self.num_speculative_tokens > 0:
            raise ValueError(f"overlap_schedule=True and num_speculative_tokens={self.num_speculative_tokens} "
                             "contradict each other: the overlap scheduler does not run MTP speculation "
                             "(set one of them off)")
        if self.overlap_schedule and self.parallel.world > 1:
            raise ValueError(f"overlap_schedule=True with {self.parallel.world} ranks: tensor/expert/data "
                             "parallel engines step serially (followers need every step's tokens); "
                             "set overlap_schedule to False or None")
        return self

    def resolved_overlap_schedule(self) -> bool:
        """Explicit settings win; by default on for single-rank CUDA engines without MTP."""
        if self.overlap_schedule is not None:
            return self.overlap_schedule
        return self.device.startswith("cuda") and self.num_speculative_tokens == 0 and self.parallel.world == 1

    def resolved_decode_graphs(self) -> bool:
        """Explicit settings win; by default graphs are on for CUDA (NCCL when tensor parallel)."""
        if self.compile_decode:
            return True
        if self.decode_graphs is not None:
            return self.decode_graphs
        if self.parallel.attention_dp:
            return False  # (refused when asked for explicitly, above)
        return self.device.startswith("cuda") and (self.parallel.world == 1 or self.parallel.backend != "gloo")

    def resolved_weight_format(self) -> str:
        if self.weight_format != "auto":
            return self.weight_format
        return "fp8_w8a8" if self.device.startswith("cuda") else "dequant"

    @field_validator("kv_cache_dtype")
    @classmethod
    def _known_kv_cache_dtype(cls, v: str) -> str:
        if v not in ("auto", "fp8"):
            raise ValueError(f"kv_cache_dtype must be 'auto' (the model dtype) or 'fp8' (fp8_ds_mla), got {v!r}")
        return v

    @field_validator("reasoning_budgets")
    @classmethod
    def _known_levels(cls, v: dict[str, Optional[int]]) -> dict[str, Optional[int]]:
        merged = dict(DEFAULT_REASONING_BUDGETS)
        for level, budget in v.items():
            if level not in REASONING_LEVELS:
                raise ValueError(f"reasoning_budgets: unknown level {level!r}, expected one of {REASONING_LEVELS}")
            if budget is not None and budget < 0:
                raise ValueError(f"reasoning_budgets[{level!r}] must be >= 0 or None, got {budget}")
            merged[level] = budget
        return merged

    @model_validator(mode="after")
    def _budget_given(self) -> "EngineConfig":
        if self.kv_budget_tokens is None and self.kv_budget_bytes is None:
            raise ValueError("kv_budget_tokens or kv_budget_bytes must be set")
        return self

    def device_pages(self, bytes_per_token: int) -> int:
        """Number of device KV pages the budget buys."""
        if self.kv_budget_bytes is not None:
            tokens = self.kv_budget_bytes // max(1, bytes_per_token)
        else:
            tokens = self.kv_budget_tokens or 0
        pages = tokens // self.page_size
        if pages < 1:
            raise ValueError(
                f"KV budget buys {tokens} tokens, less than one page of {self.page_size} tokens"
            )
        return pages

    def host_pages(self) -> int:
        return self.host_budget_tokens // self.page_size
