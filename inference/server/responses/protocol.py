"""OpenAI Responses API request bodies, validated at the edge (wrong types -> 400 naming the field).

Input items: messages (string or parts), `function_call`, `function_call_output` and `reasoning`
items, as the SDK, the Agents SDK and Codex send them back. Fields that only steer OpenAI's
service (`include`, `user`, `safety_identifier`, `service_tier`, ...) are accepted and ignored; what
cannot be honoured (background runs, hosted tools, conversations objects) is refused with a 400.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal, Optional, Union

from pydantic import BaseModel, ConfigDict, Discriminator, Field, Tag, field_validator


class _Item(BaseModel):
    model_config = ConfigDict(extra="ignore")  # annotations, logprobs, status, ...


class TextPart(_Item):
    type: Literal["input_text", "output_text", "text", "summary_text", "reasoning_text"]
    text: str


class RefusalPart(_Item):
    type: Literal["refusal"]
    refusal: str


class InputImagePart(_Item):
    """An image: a data: URL in image_url (a remote URL or a file_id is refused: no fetches, no files API)."""

    type: Literal["input_image"]
    image_url: Optional[str] = None
    file_id: Optional[str] = None
    detail: Optional[str] = None


class FilePart(_Item):
    """Files and audio: refused at conversion (the model reads text and images)."""

    type: Literal["input_file", "input_audio"]


Part = Annotated[Union[TextPart, RefusalPart, InputImagePart, FilePart], Field(discriminator="type")]


class MessageItem(_Item):
    type: Literal["message"] = "message"
    role: Literal["user", "assistant", "system", "developer"]
    content: Union[str, list[Part]]
    id: Optional[str] = None


class FunctionCallItem(_Item):
    type: Literal["function_call"]
    call_id: str = Field(min_length=1)
    name: str = Field(min_length=1)
    arguments: str
    id: Optional[str] = None


class FunctionCallOutputItem(_Item):
    type: Literal["function_call_output"]
    call_id: str = Field(min_length=1)
    output: Union[str, list[Part]]


class ReasoningItem(_Item):
    type: Literal["reasoning"]
    id: Optional[str] = None
    summary: list[TextPart] = Field(default_factory=list)
    content: Optional[list[TextPart]] = None
    encrypted_content: Optional[str] = None


InputItem = Annotated[Union[MessageItem, FunctionCallItem, FunctionCallOutputItem, ReasoningItem],
                      Field(discriminator="type")]


class FunctionTool(BaseModel):
    model_config = ConfigDict(extra="ignore")

    type: str
    name: str = Field(min_length=1, max_length=128)
    description: Optional[str] = None
    parameters: Optional[dict[str, Any]] = None
    strict: Optional[bool] = None

    @field_validator("type")
    @classmethod
    def _function_only(cls, v: str) -> str:
        if v != "function":
            raise ValueError(f"tool type {v!r} is a hosted tool that this server does not run; only "
                             "'function' and 'namespace' tools are supported (Codex: set web_search = \"disabled\")")
        return v


class NamespaceTool(BaseModel):
    """A named group of function tools (Codex sends its sub-agent tools this way); calls to them
    carry the `namespace` on the function_call item."""

    model_config = ConfigDict(extra="ignore")

    type: Literal["namespace"]
    name: str = Field(min_length=1, max_length=128)
    description: Optional[str] = None
    tools: list[FunctionTool]


def _tool_kind(v: Any) -> str:
    return "namespace" if isinstance(v, dict) and v.get("type") == "namespace" else "function"


AnyTool = Annotated[Union[Annotated[FunctionTool, Tag("function")], Annotated[NamespaceTool, Tag("namespace")]],
                    Discriminator(_tool_kind)]


class FunctionChoice(BaseModel):
    type: Literal["function"]
    name: str = Field(min_length=1)


class ReasoningConfig(BaseModel):
    model_config = ConfigDict(extra="ignore")  # generate_summary

    effort: Optional[Literal["none", "minimal", "low", "medium", "high", "xhigh"]] = None
    summary: Optional[Literal["auto", "concise", "detailed"]] = None


class TextFormat(BaseModel):
    model_config = ConfigDict(extra="allow")  # name, schema, strict, description for json_schema

    type: Literal["text", "json_object", "json_schema"]


class TextConfig(BaseModel):
    model_config = ConfigDict(extra="ignore")  # verbosity

    format: Optional[TextFormat] = None


class ResponsesRequest(BaseModel):
    model_config = ConfigDict(extra="ignore")

    model: str = Field(min_length=1)
    input: Union[str, list[InputItem]]
    instructions: Optional[str] = None
    previous_response_id: Optional[str] = Field(default=None, min_length=1)
    tools: Optional[list[AnyTool]] = None
    tool_choice: Optional[Union[Literal["none", "auto", "required"], FunctionChoice]] = None
    parallel_tool_calls: Optional[bool] = None
    reasoning: Optional[ReasoningConfig] = None
    max_output_tokens: Optional[int] = Field(default=None, ge=1)
    temperature: Optional[float] = Field(default=None, ge=0.0, le=2.0)
    top_p: Optional[float] = Field(default=None, gt=0.0, le=1.0)
    stream: Optional[bool] = False
    store: Optional[bool] = True
    metadata: Optional[dict[str, str]] = None
    text: Optional[TextConfig] = None
    prompt_cache_key: Optional[str] = Field(default=None, min_length=1, max_length=256)
    truncation: Optional[Literal["auto", "disabled"]] = None
    background: Optional[bool] = None
    conversation: Optional[Any] = None

    @field_validator("input", mode="before")
    @classmethod
    def _easy_messages(cls, v):
        # `{"role": ..., "content": ...}` without a type is a message ("EasyInputMessage").
        if isinstance(v, list):
            return [{**item, "type": "message"} if isinstance(item, dict) and "type" not in item and "role" in item
                    else item for item in v]
        return v

    def function_tools(self) -> list[tuple[Optional[str], FunctionTool]]:
        """Every function tool with its namespace (None at the top level), namespaces flattened."""
        out: list[tuple[Optional[str], FunctionTool]] = []
        for tool in self.tools or []:
            if isinstance(tool, NamespaceTool):
                out += [(tool.name, t) for t in tool.tools]
            else:
                out.append((None, tool))
        return out

    @field_validator("tools")
    @classmethod
    def _unique_names(cls, v):
        names = [t.name for tool in v or [] for t in (tool.tools if isinstance(tool, NamespaceTool) else [tool])]
        dup = sorted({n for n in names if names.count(n) > 1})
        if dup:
            raise ValueError(f"function names must be unique across namespaces, repeated: {dup}")
        return v

    @field_validator("background")
    @classmethod
    def _no_background(cls, v):
        if v:
            raise ValueError("background responses are not supported; stream instead")
        return v

    @field_validator("conversation")
    @classmethod
    def _no_conversations(cls, v):
        if v is not None:
            raise ValueError("conversation objects are not supported; use previous_response_id")
        return v


class InputTokensRequest(ResponsesRequest):
    """`POST /v1/responses/input_tokens`: a create body without the need for a model."""

    model: Optional[str] = Field(default=None, min_length=1)
