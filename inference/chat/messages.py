"""Chat data types shared by the template, the parser, the server and the agent.

No torch here: the agent's OpenAI backend imports this module without loading the engine.
"""

from __future__ import annotations

import json
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from inference.chat.content_parts import ImagePart, split_content, wire_parts
from inference.chat.wire_messages import normalize_message

Role = Literal["system", "user", "assistant", "tool"]


class ToolCall(BaseModel):
    """One function call made by the assistant; `arguments` are already decoded."""

    model_config = ConfigDict(extra="forbid")

    id: str
    name: str
    arguments: dict[str, Any] = Field(default_factory=dict)

    @field_validator("arguments", mode="before")
    @classmethod
    def _decode_json_arguments(cls, value: Any) -> Any:
        # The OpenAI wire format carries arguments as a JSON string.
        if isinstance(value, str):
            try:
                value = json.loads(value) if value.strip() else {}
            except json.JSONDecodeError as exc:
                raise ValueError(f"arguments: expected a JSON object string, got {value!r} ({exc})") from exc
        if not isinstance(value, dict):
            raise ValueError(f"arguments: expected a JSON object, got {type(value).__name__}")
        return value

    @classmethod
    def from_openai(cls, data: dict[str, Any]) -> ToolCall:
        """Accept `{"id", "type": "function", "function": {"name", "arguments"}}`."""
        fn = data.get("function") or {}
        return cls(id=data.get("id") or "", name=fn.get("name", ""), arguments=fn.get("arguments") or {})

    def to_openai(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "type": "function",
            "function": {"name": self.name, "arguments": json.dumps(self.arguments, ensure_ascii=False)},
        }


class ToolSpec(BaseModel):
    """A function the model may call; `parameters` is a JSON schema object."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(min_length=1)
    description: str = ""
    parameters: dict[str, Any] = Field(default_factory=lambda: {"type": "object", "properties": {}})

    @classmethod
    def from_openai(cls, data: dict[str, Any]) -> ToolSpec:
        """Accept `{"type": "function", "function": {...}}` or the bare function object."""
        if "function" in data:
            if data.get("type", "function") != "function":
                raise ValueError(f"tools[].type: expected 'function', got {data.get('type')!r}")
            data = data["function"]
        return cls(
            name=data.get("name", ""),
            description=data.get("description") or "",
            parameters=data.get("parameters") or {"type": "object", "properties": {}},
        )

    def function_dict(self) -> dict[str, Any]:
        return {"name": self.name, "description": self.description, "parameters": self.parameters}

    def to_openai(self) -> dict[str, Any]:
        return {"type": "function", "function": self.function_dict()}

    def parameter_type(self, key: str) -> str | list[str] | None:
        """The JSON-schema `type` of one argument, or None when the schema does not say."""
        prop = (self.parameters.get("properties") or {}).get(key)
        if not isinstance(prop, dict):
            return None
        return prop.get("type")


class Message(BaseModel):
    """One chat message in the OpenAI shape, plus GLM's `reasoning_content`. Wire dicts go through
    wire_messages.normalize_message: unknown keys dropped, `reasoning` and `developer` mapped."""

    model_config = ConfigDict(extra="forbid")

    _wire = model_validator(mode="before")(classmethod(lambda cls, data: normalize_message(data)))

    role: Role
    content: str | None = None
    reasoning_content: str | None = None
    tool_calls: list[ToolCall] | None = None
    tool_call_id: str | None = None
    name: str | None = None
    # Images of a user or tool message, at their offsets in `content` (content_parts.py).
    images: list[ImagePart] | None = None

    @model_validator(mode="before")
    @classmethod
    def _split_parts(cls, data: Any) -> Any:
        # OpenAI clients may send content as a list of text and image_url parts.
        if isinstance(data, dict) and isinstance(data.get("content"), list):
            text, images = split_content(data["content"])
            data = {**data, "content": text}
            if images:
                data["images"] = [*(data.get("images") or []), *images]
        return data

    @field_validator("tool_calls", mode="before")
    @classmethod
    def _accept_openai_tool_calls(cls, value: Any) -> Any:
        if isinstance(value, list):
            return [ToolCall.from_openai(v) if isinstance(v, dict) and "function" in v else v for v in value]
        return value

    @model_validator(mode="after")
    def _check_role_fields(self) -> Message:
        if self.tool_calls and self.role != "assistant":
            raise ValueError(f"tool_calls: only assistant messages carry tool calls, got role {self.role!r}")
        if self.images:
            if self.role not in ("user", "tool"):
                raise ValueError(f"content[{self.images[0].index}]: only user and tool messages carry images, "
                                 f"got role {self.role!r}")
            offsets = [p.at for p in self.images]
            if offsets != sorted(offsets) or offsets[-1] > len(self.content or ""):
                raise ValueError(f"images: offsets {offsets} must be ascending and within the text "
                                 f"({len(self.content or '')} characters)")
        else:
            self.images = None  # [] and None mean the same: keep equality and dumps canonical
        return self

    @classmethod
    def system(cls, content: str) -> Message:
        return cls(role="system", content=content)

    @classmethod
    def user(cls, content: str, images: list[ImagePart] | None = None) -> Message:
        return cls(role="user", content=content, images=images)

    @classmethod
    def assistant(
        cls, content: str | None = None, reasoning: str | None = None, tool_calls: list[ToolCall] | None = None
    ) -> Message:
        return cls(role="assistant", content=content, reasoning_content=reasoning, tool_calls=tool_calls or None)

    @classmethod
    def tool(cls, content: str, tool_call_id: str | None = None, name: str | None = None,
             images: list[ImagePart] | None = None) -> Message:
        return cls(role="tool", content=content, tool_call_id=tool_call_id, name=name, images=images)

    def to_openai(self) -> dict[str, Any]:
        """The wire dict (tool call arguments as JSON strings; images as content parts); None
        fields are left out."""
        content = wire_parts(self.content or "", self.images) if self.images else self.content
        out: dict[str, Any] = {"role": self.role, "content": content}
        if self.reasoning_content is not None:
            out["reasoning_content"] = self.reasoning_content
        if self.tool_calls:
            out["tool_calls"] = [tc.to_openai() for tc in self.tool_calls]
        if self.tool_call_id is not None:
            out["tool_call_id"] = self.tool_call_id
        if self.name is not None:
            out["name"] = self.name
        return out

    def to_template_dict(self) -> dict[str, Any]:
        """The dict a Jinja chat template sees (tool call arguments stay decoded; images as
        {"type": "image"} items, as transformers' processors pass them)."""
        out = self.to_openai()
        if self.images:
            out["content"] = wire_parts(self.content or "", self.images, lambda p: {"type": "image", "url": p.url})
        if self.tool_calls:
            out["tool_calls"] = [
                {"id": tc.id, "type": "function", "function": {"name": tc.name, "arguments": tc.arguments}}
                for tc in self.tool_calls
            ]
        return out
