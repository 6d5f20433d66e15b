"""Anthropic Messages API request bodies, validated at the edge (wrong types -> 400 naming the field).

Block and tool shapes follow the public API; fields that only steer Anthropic's own service
(`cache_control`, `citations`, `metadata`, `service_tier`, beta switches) are accepted and ignored,
since clients such as Claude Code send them on every request. What the model cannot do (server
tools; images on a text-only checkpoint) is refused with a 400 rather than silently dropped.
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal, Optional, Union

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

_TOOL_NAME = re.compile(r"^[a-zA-Z0-9_-]{1,128}$")


class _Block(BaseModel):
    model_config = ConfigDict(extra="ignore")  # cache_control, citations, ...


class TextBlock(_Block):
    type: Literal["text"]
    text: str


class ImageBlock(_Block):
    type: Literal["image"]
    source: dict[str, Any]


class DocumentBlock(_Block):
    type: Literal["document"]
    source: dict[str, Any]
    title: Optional[str] = None


class ThinkingBlock(_Block):
    type: Literal["thinking"]
    thinking: str
    signature: str = ""


class RedactedThinkingBlock(_Block):
    type: Literal["redacted_thinking"]
    data: str


class ToolUseBlock(_Block):
    type: Literal["tool_use"]
    id: str = Field(min_length=1)
    name: str = Field(min_length=1)
    input: dict[str, Any]


ResultPart = Annotated[Union[TextBlock, ImageBlock, DocumentBlock], Field(discriminator="type")]


class ToolResultBlock(_Block):
    type: Literal["tool_result"]
    tool_use_id: str = Field(min_length=1)
    content: Union[str, list[ResultPart]] = ""
    is_error: bool = False


ContentBlock = Annotated[
    Union[TextBlock, ImageBlock, DocumentBlock, ThinkingBlock, RedactedThinkingBlock, ToolUseBlock, ToolResultBlock],
    Field(discriminator="type"),
]


class MessageParam(BaseModel):
    model_config = ConfigDict(extra="forbid")

    # "system" mid-conversation (Claude Code sends it, beta "mid-conversation-system").
    role: Literal["user", "assistant", "system"]
    content: Union[str, list[ContentBlock]]


class ToolParam(BaseModel):
    """A client tool (`type` absent or "custom"); server tools (web search, code execution, ...) run
    on Anthropic's side and do not exist here."""

    model_config = ConfigDict(extra="ignore")

    name: str
    input_schema: dict[str, Any]
    description: str = ""
    type: Optional[str] = None

    @field_validator("type")
    @classmethod
    def _client_tool(cls, v):
        if v not in (None, "custom"):
            raise ValueError(f"tool type {v!r} is a server tool that this server does not run; "
                             "only client tools (type 'custom' or no type) are supported")
        return v

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        if not _TOOL_NAME.match(v):
            raise ValueError(f"tool name {v!r} must match {_TOOL_NAME.pattern}")
        return v

    @field_validator("input_schema")
    @classmethod
    def _object_schema(cls, v: dict) -> dict:
        if v.get("type") != "object":
            raise ValueError(f"input_schema.type must be 'object', got {v.get('type')!r}")
        return v


class ToolChoiceAuto(BaseModel):
    type: Literal["auto"]
    disable_parallel_tool_use: bool = False


class ToolChoiceAny(BaseModel):
    type: Literal["any"]
    disable_parallel_tool_use: bool = False


class ToolChoiceTool(BaseModel):
    type: Literal["tool"]
    name: str = Field(min_length=1)
    disable_parallel_tool_use: bool = False


class ToolChoiceNone(BaseModel):
    type: Literal["none"]


ToolChoice = Annotated[Union[ToolChoiceAuto, ToolChoiceAny, ToolChoiceTool, ToolChoiceNone],
                       Field(discriminator="type")]


class ThinkingEnabled(BaseModel):
    model_config = ConfigDict(extra="ignore")  # display

    type: Literal["enabled"]
    budget_tokens: int = Field(ge=1024)


class ThinkingDisabled(BaseModel):
    type: Literal["disabled"]


class ThinkingAdaptive(BaseModel):
    """The model decides how long to think: thinking on, no budget beyond max_tokens."""

    model_config = ConfigDict(extra="ignore")

    type: Literal["adaptive"]


Thinking = Annotated[Union[ThinkingEnabled, ThinkingDisabled, ThinkingAdaptive], Field(discriminator="type")]


class OutputConfig(BaseModel):
    """Claude's effort dial; it picks the template's reasoning effort when thinking is on."""

    model_config = ConfigDict(extra="ignore")

    effort: Optional[Literal["low", "medium", "high", "xhigh", "max"]] = None


class CountTokensRequest(BaseModel):
    """`POST /v1/messages/count_tokens`; also the shared part of a Messages request."""

    model_config = ConfigDict(extra="ignore")  # metadata, service_tier, context_management, ...

    model: str = Field(min_length=1)
    messages: list[MessageParam] = Field(min_length=1)
    system: Optional[Union[str, list[TextBlock]]] = None
    tools: Optional[list[ToolParam]] = None
    tool_choice: Optional[ToolChoice] = None
    thinking: Optional[Thinking] = None
    output_config: Optional[OutputConfig] = None

    @field_validator("messages")
    @classmethod
    def _starts_with_user(cls, v: list[MessageParam]) -> list[MessageParam]:
        if v and v[0].role != "user":
            raise ValueError(f"the first message must have role 'user', got {v[0].role!r}")
        return v

    @model_validator(mode="after")
    def _unique_tool_names(self):
        names = [t.name for t in self.tools or []]
        dup = sorted({n for n in names if names.count(n) > 1})
        if dup:
            raise ValueError(f"tools: names must be unique, repeated: {dup}")
        return self


class MessagesRequest(CountTokensRequest):
    max_tokens: int = Field(ge=1)
    stream: bool = False
    stop_sequences: Optional[list[str]] = Field(default=None, max_length=16)
    temperature: Optional[float] = Field(default=None, ge=0.0, le=1.0)
    top_p: Optional[float] = Field(default=None, gt=0.0, le=1.0)
    top_k: Optional[int] = Field(default=None, ge=0)
    metadata: Optional[dict[str, Any]] = None

    @model_validator(mode="after")
    def _budget_below_max_tokens(self):
        if isinstance(self.thinking, ThinkingEnabled) and self.thinking.budget_tokens >= self.max_tokens:
            raise ValueError(f"thinking.budget_tokens: {self.thinking.budget_tokens} must be less than "
                             f"max_tokens ({self.max_tokens})")
        return self
