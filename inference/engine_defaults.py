"""One default engine configuration for every caller (`horizon serve`, the agent's `embedded:` backend).

`EngineConfig` requires a KV budget because only the caller knows the memory it may use. Callers
that were not told one get enough for the model's whole context (plus speculative drafts), capped
at `DEFAULT_KV_TOKENS_CAP` tokens and `DEFAULT_KV_BYTES_CAP` bytes of cache, so a 200K-context
checkpoint does not reserve tens of GiB by default. Explicit settings always win.

    config = default_engine_config("ckpt/", dtype="float32", max_running=8)

Bad settings raise `EngineSettingsError` with a one-line message naming the field.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

DEFAULT_KV_TOKENS_CAP = 65536
DEFAULT_KV_BYTES_CAP = 8 << 30


class EngineSettingsError(ValueError):
    """An engine setting is invalid; the message names the field, the value and what was expected."""


def default_engine_config(checkpoint_path: str | Path, **overrides: Any):
    """A validated `EngineConfig` for the checkpoint: `overrides` as given, plus a default KV budget
    when neither `kv_budget_tokens` nor `kv_budget_bytes` is set (None counts as not set)."""
    from pydantic import ValidationError

    from inference.engine.engine_config import EngineConfig

    settings = {key: value for key, value in overrides.items() if value is not None}
    budget_given = "kv_budget_tokens" in settings or "kv_budget_bytes" in settings
    try:
        # A placeholder budget lets everything else (dtype, page size, drafts) be validated first.
        config = EngineConfig(**settings) if budget_given else EngineConfig(kv_budget_tokens=1, **settings)
    except ValidationError as exc:
        raise EngineSettingsError(describe_validation_error(exc)) from None
    if budget_given:
        return config
    return config.model_copy(update={"kv_budget_tokens": default_kv_budget_tokens(checkpoint_path, config)})


def default_kv_budget_tokens(checkpoint_path: str | Path, config) -> int:
    """Whole pages covering the model's context and drafts, within the token and byte caps."""
    try:
        max_position, per_token = _context_and_bytes(Path(checkpoint_path), config)
    except (OSError, ValueError) as exc:  # ConfigError is a ValueError
        raise EngineSettingsError(f"{checkpoint_path}: cannot read the model config: {exc}") from None
    page = config.page_size
    wanted = -(-(max_position + config.num_speculative_tokens) // page) * page
    capped = min(wanted, DEFAULT_KV_TOKENS_CAP, DEFAULT_KV_BYTES_CAP // per_token)
    return max(page, capped // page * page)


def describe_validation_error(exc) -> str:
    """A pydantic ValidationError as one line: `field: got VALUE (what was expected); ...`."""
    parts = []
    for err in exc.errors():
        field = ".".join(str(p) for p in err["loc"]) or "(settings)"
        message = err["msg"].removeprefix("Value error, ")
        if err["type"] == "extra_forbidden":
            parts.append(f"{field}: unknown setting")
        elif err["loc"]:
            parts.append(f"{field}: got {err.get('input')!r} ({message[:1].lower()}{message[1:]})")
        else:
            parts.append(message)
    return "; ".join(parts)


def _context_and_bytes(path: Path, config) -> tuple[int, int]:
    """(max positions, KV cache bytes per token) of a GLM-5.x or GLM-5.3-Flash checkpoint."""
    import torch

    from inference.glm5_next.describe import is_flash_checkpoint

    if is_flash_checkpoint(path):  # DSA layers only: KDA state is per sequence, not per token
        from inference.glm5_next.config import Glm5NextTextConfig
        from inference.glm5_next.describe import kv_bytes_per_token as flash_bytes_per_token

        flash = Glm5NextTextConfig.from_pretrained(path)
        return flash.max_position_embeddings, flash_bytes_per_token(flash, getattr(torch, config.dtype).itemsize)
    from inference.config import ModelConfig
    from inference.kv_cache import kv_bytes_per_token

    model = ModelConfig.from_pretrained(path)
    return model.max_position_embeddings, kv_bytes_per_token(model, getattr(torch, config.dtype), config.kv_cache_dtype)
