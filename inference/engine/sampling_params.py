"""Per-request sampling parameters."""

from __future__ import annotations

from typing import Optional

from pydantic import BaseModel, ConfigDict, Field, field_validator

from inference.grammar.spec import GrammarSpec


class SamplingParams(BaseModel):
    """How to pick the next token and when to stop.

    temperature 0 means greedy. top_k 0 and top_p 1 and min_p 0 disable those filters.
    `logprobs=n` returns the chosen token's logprob plus the n most likely alternatives (of the
    model's distribution, before penalties, bias and grammar masks).
    The checkpoint's end-of-sequence ids stop generation too unless `ignore_eos` is set.

    Penalties act on the logits before any filter, greedy included (OpenAI / vLLM semantics):
    presence subtracts `presence_penalty` once from every token already in the output, frequency
    subtracts `frequency_penalty` per occurrence in the output, and `repetition_penalty` (CTRL,
    1 = off) divides positive / multiplies negative logits of every token seen in prompt or output.
    `logit_bias` adds a fixed value per token id (-100 bans it in practice, +100 forces it).
    `grammar` constrains every output token to a grammar (JSON, a JSON schema, GLM tool calls;
    inference/grammar/spec.py); its mask applies after penalties and bias, before the filters.
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
    presence_penalty: float = Field(default=0.0, ge=-2.0, le=2.0)
    frequency_penalty: float = Field(default=0.0, ge=-2.0, le=2.0)
    repetition_penalty: float = Field(default=1.0, gt=0.0, le=10.0)
    logit_bias: dict[int, float] = Field(default_factory=dict)
    grammar: Optional[GrammarSpec] = None

    @field_validator("logit_bias")
    @classmethod
    def _bias_range(cls, v: dict[int, float]) -> dict[int, float]:
        for token, bias in v.items():
            if token < 0:
                raise ValueError(f"logit_bias: token id {token} is negative")
            if not -100.0 <= bias <= 100.0:
                raise ValueError(f"logit_bias: bias {bias} for token {token} is outside [-100, 100]")
        return v

    @property
    def greedy(self) -> bool:
        return self.temperature == 0.0

    @property
    def penalized(self) -> bool:
        """Whether sampling needs the sequence's tokens (presence / frequency / repetition)."""
        return self.presence_penalty != 0.0 or self.frequency_penalty != 0.0 or self.repetition_penalty != 1.0
