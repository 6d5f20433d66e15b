"""OpenAI-compatible request bodies, validated at the edge (wrong types -> 400 naming the field).

Unknown fields are ignored, as OpenAI clients send many optional ones we do not use.
"""

from __future__ import annotations

from typing import Any, Literal, Optional, Union

from pydantic import BaseModel, ConfigDict, Field, field_validator

from inference.chat.messages import Message, ToolSpec


class FunctionName(BaseModel):
    name: str


class NamedToolChoice(BaseModel):
    type: Literal["function"] = "function"
    function: FunctionName


class StreamOptions(BaseModel):
    include_usage: bool = False


class TemplateKwargs(BaseModel):
    """`chat_template_kwargs`: the GLM template switches (unknown keys are ignored)."""

    model_config = ConfigDict(extra="ignore")

    enable_thinking: Optional[bool] = None
    clear_thinking: Optional[bool] = None
    reasoning_effort: Optional[str] = None


class ResponseFormat(BaseModel):
    """Only plain text: there is no constrained decoding, and a format the output would not follow
    is refused rather than silently ignored."""

    model_config = ConfigDict(extra="allow")

    type: str

    @field_validator("type")
    @classmethod
    def _text_only(cls, v: str) -> str:
        if v != "text":
            raise ValueError(f"type {v!r} is not supported: there is no constrained decoding here; "
                             "use 'text' and ask for the format in the prompt")
        return v


class SamplingFields(BaseModel):
    """Fields shared by /v1/chat/completions and /v1/completions."""

    model_config = ConfigDict(extra="ignore")

    model: str
    stream: bool = False
    stream_options: Optional[StreamOptions] = None
    temperature: Optional[float] = Field(default=None, ge=0.0, le=2.0)
    top_p: Optional[float] = Field(default=None, gt=0.0, le=1.0)
    top_k: Optional[int] = Field(default=None, ge=0)
    min_p: Optional[float] = Field(default=None, ge=0.0, le=1.0)
    max_tokens: Optional[int] = Field(default=None, ge=1)
    max_completion_tokens: Optional[int] = Field(default=None, ge=1)
    stop: Optional[Union[str, list[str]]] = None
    seed: Optional[int] = None
    n: int = Field(default=1, ge=1, le=16)
    logprobs: Optional[Union[bool, int]] = None
    top_logprobs: Optional[int] = Field(default=None, ge=0, le=20)
    session_id: Optional[str] = Field(default=None, min_length=1, max_length=256)
    presence_penalty: Optional[float] = Field(default=None, ge=-2.0, le=2.0)
    frequency_penalty: Optional[float] = Field(default=None, ge=-2.0, le=2.0)
    repetition_penalty: Optional[float] = Field(default=None, gt=0.0, le=10.0)  # vLLM's extension
    logit_bias: Optional[dict[str, float]] = None  # token id (as a string, like OpenAI) -> bias
    response_format: Optional[ResponseFormat] = None
    # vLLM's extension: keep generating through end-of-turn tokens (benchmarks, load tests).
    ignore_eos: bool = False

    @field_validator("logit_bias")
    @classmethod
    def _bias(cls, v):
        for key, bias in (v or {}).items():
            if not key.lstrip("-").isdigit():
                raise ValueError(f"logit_bias: key {key!r} is not a token id")
            if not -100.0 <= bias <= 100.0:
                raise ValueError(f"logit_bias: bias {bias} for token {key} is outside [-100, 100]")
        return v

    @field_validator("stop")
    @classmethod
    def _stop_list(cls, v):
        if isinstance(v, list) and len(v) > 16:
            raise ValueError(f"at most 16 stop strings, got {len(v)}")
        return v

    def stop_strings(self) -> list[str]:
        if self.stop is None:
            return []
        return [self.stop] if isinstance(self.stop, str) else list(self.stop)

    def token_limit(self) -> Optional[int]:
        return self.max_completion_tokens or self.max_tokens


class ChatCompletionRequest(SamplingFields):
    messages: list[Message] = Field(min_length=1)
    tools: Optional[list[dict[str, Any]]] = None
    tool_choice: Optional[Union[Literal["none", "auto", "required"], NamedToolChoice]] = None
    parallel_tool_calls: Optional[bool] = None
    reasoning_effort: Optional[str] = None
    chat_template_kwargs: Optional[TemplateKwargs] = None

    @field_validator("tools")
    @classmethod
    def _tool_specs(cls, v):
        if v is None:
            return v
        for i, tool in enumerate(v):
            try:
                ToolSpec.from_openai(tool)
            except ValueError as exc:
                raise ValueError(f"tools[{i}]: {exc}") from exc
        return v

    def tool_specs(self) -> list[ToolSpec]:
        return [ToolSpec.from_openai(t) for t in self.tools or []]


class CompletionRequest(SamplingFields):
    prompt: Union[str, list[int], list[str]]
    echo: bool = False

    @field_validator("prompt")
    @classmethod
    def _one_prompt(cls, v):
        if isinstance(v, list) and v and isinstance(v[0], str):
            if len(v) != 1:
                raise ValueError(f"only one prompt per request is supported, got {len(v)}")
        if isinstance(v, list) and not v:
            raise ValueError("prompt is empty")
        return v
