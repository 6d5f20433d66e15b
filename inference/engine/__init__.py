"""Horizon's serving engine: paged KV, agent-tuned prefix cache with a host tier, continuous
batching, sampling, reasoning budgets and MTP speculation. See engine.py for the entry point."""

from inference.engine.engine import Engine
from inference.engine.engine_config import EngineConfig
from inference.engine.request import (
    EngineError,
    GenerateRequest,
    GenerateResult,
    StreamDelta,
    TokenLogprob,
    Usage,
)
from inference.engine.request_handle import RequestHandle
from inference.engine.sampling_params import SamplingParams

__all__ = [
    "Engine", "EngineConfig", "EngineError", "GenerateRequest", "GenerateResult", "RequestHandle",
    "SamplingParams", "StreamDelta", "TokenLogprob", "Usage",
]
