"""Horizon's embedded GLM-5.x inference engine.

Importing `inference` stays light (no torch): the chat/agent code imports `inference.chat` on
machines without torch. The model entry points are resolved lazily on first attribute access.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from inference.config import ModelConfig
    from inference.forward_batch import ForwardBatch
    from inference.kv_cache import PagedKVCache
    from inference.loader import load_model
    from inference.model import Glm5ForCausalLM, ModelOutput

_LAZY = {
    "load_model": "inference.loader",
    "ModelConfig": "inference.config",
    "ForwardBatch": "inference.forward_batch",
    "PagedKVCache": "inference.kv_cache",
    "PageData": "inference.kv_cache",
    "Glm5ForCausalLM": "inference.model",
    "ModelOutput": "inference.model",
    "write_random_checkpoint": "inference.random_checkpoint",
}

__all__ = sorted(_LAZY)


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'inference' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(module), name)
