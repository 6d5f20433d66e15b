"""OpenAI-compatible request bodies, validated at the edge (wrong types -> 400 naming the field).

Every field of OpenAI's request schemas is known here: those that cannot change the output
(`user`, `metadata`, `store`, ...) are accepted and ignored, those we cannot honour are refused
when set (`refusals()`), and a field nobody defines gets a 400 naming it (a typo in a sampling
parameter must not pass silently). An explicit null means "default", as in OpenAI's spec.
Inside a message, unknown keys are dropped (inference/chat/wire_messages.py).
"""

from __future__ import annotations

from typing import Any, Literal, Optional, Union

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

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


class JsonSchemaFormat(BaseModel):
    """`response_format.json_schema`: the output is constrained to `schema` (strict or not: the
    grammar always enforces it)."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    name: str = Field(default="response", max_length=64)
    description: Optional[str] = None
    schema_: dict[str, Any] = Field(default_factory=dict, alias="schema")
    strict: Optional[bool] = None


class ResponseFormat(BaseModel):
    """`text`, `json_object` (any JSON object) or `json_schema`, enforced by constrained decoding."""

    model_config = ConfigDict(extra="forbid")

    type: Literal["text", "json_object", "json_schema"]
    json_schema: Optional[JsonSchemaFormat] = None

    @model_validator(mode="after")
    def _schema_given(self) -> "ResponseFormat":
        if self.type == "json_schema" and self.json_schema is None:
            raise ValueError("type 'json_schema' needs a json_schema object with a schema")
        return self


def _nulls_mean_default(cls, data: Any) -> Any:
    """Drop explicit nulls of fields whose default is not None (`"n": null` is n=1)."""
    if not isinstance(data, dict):
        return data
    fields = cls.model_fields
    return {k: v for k, v in data.items()
            if v is not None or k not in fields or fields[k].is_required() or fields[k].default is None}


class SamplingFields(BaseModel):
    """Fields shared by /v1/chat/completions and /v1/completions. Strict types: "yes" is not a
    bool and "10" not an int (OpenAI refuses them too)."""

    model_config = ConfigDict(extra="forbid", strict=True)

    _nulls = model_validator(mode="before")(classmethod(_nulls_mean_default))

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
    # OpenAI fields that cannot change the output: accepted and ignored.
    user: Optional[str] = None
    metadata: Optional[dict[str, Any]] = None
    store: Optional[bool] = None
    service_tier: Optional[str] = None
    safety_identifier: Optional[str] = None
    prompt_cache_key: Optional[str] = None
    prompt_cache_retention: Optional[str] = None

    @field_validator("logit_bias")
    @classmethod
    def _bias(cls, v):
        for key, bias in (v or {}).items():
            if not key.lstrip("-").isdigit():
                raise ValueError(f"logit_bias: key {key!r} is not a token id")
            if not -100.0 <= bias <= 100.0:
                raise ValueError(f"logit_bias: bias {bias} for token {key} is outside [-100, 100]")
        return v

    @field_validator("logprobs")
    @classmethod
    def _logprobs_count(cls, v):
        if isinstance(v, int) and not isinstance(v, bool) and not 0 <= v <= 20:
            raise ValueError(f"logprobs: {v} alternatives; expected 0..20")
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

    def refusals(self) -> list[tuple[str, str]]:
        """(param, why) for each field that is set to something this server cannot honour."""
        out = []
        if self.top_logprobs is not None and (self.logprobs is None or self.logprobs is False):
            out.append(("top_logprobs", f"top_logprobs: {self.top_logprobs} needs logprobs: true"))
        return out


class ChatCompletionRequest(SamplingFields):
    messages: list[Message] = Field(min_length=1)
    tools: Optional[list[dict[str, Any]]] = None
    tool_choice: Optional[Union[Literal["none", "auto", "required"], NamedToolChoice]] = None
    parallel_tool_calls: Optional[bool] = None
    reasoning_effort: Optional[str] = None
    chat_template_kwargs: Optional[TemplateKwargs] = None
    # OpenAI fields that cannot change the output here: accepted and ignored.
    prediction: Optional[dict[str, Any]] = None
    verbosity: Optional[str] = None
    # OpenAI fields refused when set (refusals()).
    audio: Optional[dict[str, Any]] = None
    modalities: Optional[list[str]] = None
    web_search_options: Optional[dict[str, Any]] = None
    functions: Optional[list[dict[str, Any]]] = None
    function_call: Optional[Union[str, dict[str, Any]]] = None

    def refusals(self) -> list[tuple[str, str]]:
        out = super().refusals()
        if self.audio is not None or (self.modalities and set(self.modalities) != {"text"}):
            out.append(("modalities", f"modalities: only text output is supported, got {self.modalities}"))
        if self.web_search_options is not None:
            out.append(("web_search_options", "web_search_options: this server has no web search"))
        if self.functions is not None or self.function_call is not None:
            param = "functions" if self.functions is not None else "function_call"
            out.append((param, f"{param}: the deprecated functions API is not supported; send tools and tool_choice"))
        return out

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
    best_of: Optional[int] = Field(default=None, ge=1)
    suffix: Optional[str] = None

    def refusals(self) -> list[tuple[str, str]]:
        out = super().refusals()
        if self.best_of is not None and self.best_of != self.n:
            out.append(("best_of", f"best_of: {self.best_of} is not supported (only best_of = n)"))
        if self.suffix:
            out.append(("suffix", "suffix: fill-in-the-middle is not supported"))
        return out

    @field_validator("prompt")
    @classmethod
    def _one_prompt(cls, v):
        if isinstance(v, list) and v and isinstance(v[0], str):
            if len(v) != 1:
                raise ValueError(f"only one prompt per request is supported, got {len(v)}")
        if isinstance(v, list) and not v:
            raise ValueError("prompt is empty")
        return v
