"""Chat data types shared by the template, the parser, the server and the agent.

No torch here: the agent's OpenAI backend imports this module without loading the engine.
"""

from __future__ import annotations

import json
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

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

    @field_validator("content", mode="before")
    @classmethod
    def _flatten_text_parts(cls, value: Any) -> Any:
        # OpenAI clients may send content as a list of {"type": "text", "text": ...} parts.
        if isinstance(value, list):
            texts = []
            for i, part in enumerate(value):
                if isinstance(part, str):
                    texts.append(part)
                elif isinstance(part, dict) and part.get("type") == "text" and isinstance(part.get("text"), str):
                    texts.append(part["text"])
                else:
                    raise ValueError(f"content[{i}]: only text parts are supported, got {part!r:.80}")
            return "".join(texts)
        return value

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
        return self

    @classmethod
    def system(cls, content: str) -> Message:
        return cls(role="system", content=content)

    @classmethod
    def user(cls, content: str) -> Message:
        return cls(role="user", content=content)

    @classmethod
    def assistant(
        cls, content: str | None = None, reasoning: str | None = None, tool_calls: list[ToolCall] | None = None
    ) -> Message:
        return cls(role="assistant", content=content, reasoning_content=reasoning, tool_calls=tool_calls or None)

    @classmethod
    def tool(cls, content: str, tool_call_id: str | None = None, name: str | None = None) -> Message:
        return cls(role="tool", content=content, tool_call_id=tool_call_id, name=name)

    def to_openai(self) -> dict[str, Any]:
        """The wire dict (tool call arguments as JSON strings); None fields are left out."""
        out: dict[str, Any] = {"role": self.role, "content": self.content}
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
        """The dict a Jinja chat template sees (tool call arguments stay decoded)."""
        out = self.to_openai()
        if self.tool_calls:
            out["tool_calls"] = [
                {"id": tc.id, "type": "function", "function": {"name": tc.name, "arguments": tc.arguments}}
                for tc in self.tool_calls
            ]
        return out
