"""Per-request sampling parameters."""

from __future__ import annotations

from typing import Optional

from pydantic import BaseModel, ConfigDict, Field


class SamplingParams(BaseModel):
    """How to pick the next token and when to stop.

    temperature 0 means greedy. top_k 0 and top_p 1 and min_p 0 disable those filters.
    `logprobs=n` returns the chosen token's logprob plus the n most likely alternatives.
    The checkpoint's end-of-sequence ids stop generation too unless `ignore_eos` is set.
    """

    model_config = ConfigDict(extra="forbid")

    temperature: float = Field(default=1.0, ge=0.0)
    top_p: float = Field(default=1.0, gt=0.0, le=1.0)
    top_k: int = Field(default=0, ge=0)
    min_p: float = Field(default=0.0, ge=0.0, le=1.0)
    seed: Optional[int] = None
    # Not bounded here: the engine rejects max_tokens < 1 with an EngineError naming the field,
    # so one bad request never takes down a batch.
    max_tokens: int = 16
    stop_token_ids: list[int] = Field(default_factory=list)
    stop: list[str] = Field(default_factory=list)
    logprobs: Optional[int] = Field(default=None, ge=0, le=20)
    ignore_eos: bool = False

    @property
    def greedy(self) -> bool:
        return self.temperature == 0.0
