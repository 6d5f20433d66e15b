"""Public request / result types and the engine's error type."""

from __future__ import annotations

from typing import Literal, Optional

from pydantic import BaseModel, ConfigDict, Field

from inference.engine.multimodal import PromptImage
from inference.engine.sampling_params import SamplingParams

FinishReason = Literal["stop", "length", "abort"]
ReasoningEffort = Literal["none", "low", "medium", "high", "max"]


class EngineError(ValueError):
    """A request the engine refuses; the message names the field, the value and what was expected."""

    def __init__(self, field: str, message: str):
        super().__init__(f"{field}: {message}")
        self.field = field


class GenerateRequest(BaseModel):
    model_config = ConfigDict(extra="forbid", arbitrary_types_allowed=True)

    prompt_ids: list[int]
    params: SamplingParams = Field(default_factory=SamplingParams)
    session_id: Optional[str] = None
    reasoning_effort: Optional[ReasoningEffort] = None
    # Thinking tokens allowed, overriding the effort level's budget (Anthropic's `budget_tokens`).
    reasoning_budget: Optional[int] = Field(default=None, ge=0)
    request_id: Optional[str] = None
    # Images whose placeholders are in prompt_ids, in prompt order (vision checkpoints only).
    images: list[PromptImage] = Field(default_factory=list)


class Usage(BaseModel):
    prompt_tokens: int = 0
    cached_tokens: int = 0
    cached_tokens_device: int = 0
    cached_tokens_host: int = 0
    completion_tokens: int = 0
    spec_draft_tokens: int = 0
    spec_accepted_tokens: int = 0


class TokenLogprob(BaseModel):
    token_id: int
    logprob: float
    top: list[tuple[int, float]] = Field(default_factory=list)


class StreamDelta(BaseModel):
    token_ids: list[int] = Field(default_factory=list)
    finish_reason: Optional[FinishReason] = None
    usage: Optional[Usage] = None
    logprobs: Optional[list[TokenLogprob]] = None
    stop_reason: Optional[str | int] = None


class GenerateResult(BaseModel):
    request_id: str
    token_ids: list[int]
    finish_reason: FinishReason
    usage: Usage
    logprobs: Optional[list[TokenLogprob]] = None
    # The stop string or stop token id that ended generation, when one did.
    stop_reason: Optional[str | int] = None
