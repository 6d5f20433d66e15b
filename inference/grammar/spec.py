"""What output a request must follow: the engine-level constraint any API front-end can set.

A `GrammarSpec` on `SamplingParams.grammar` makes the engine mask every sampled token to the
grammar (inference/grammar/compiler.py builds it with xgrammar). No xgrammar here: front-ends
and the agent import this without the library.

Kinds:
- `json_object`: any JSON object (OpenAI `response_format: {"type": "json_object"}`);
- `json_schema`: JSON valid against `json_schema` (`response_format` `json_schema`);
- `tool_call`: GLM-5.x tool calls, `<tool_call>NAME<arg_key>k</arg_key><arg_value>v</arg_value>...
  </tool_call>`, with each call's arguments following its tool's JSON schema. `tool_choice`
  "required" allows any of `tools` (text may come first), a function name forces that one.

`reasoning=True` means generation starts inside an open `<think>` (the GLM prompt ends with it):
the reasoning is free text up to `</think>` and the constraint applies after it.
"""

from __future__ import annotations

import json
from functools import cached_property
from typing import Any, Literal, Optional

from pydantic import BaseModel, ConfigDict, Field, model_validator


class ToolSchema(BaseModel):
    """One callable function: its name and the JSON schema of its arguments."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(min_length=1)
    parameters: dict[str, Any] = Field(default_factory=lambda: {"type": "object", "properties": {}})


class GrammarSpec(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    kind: Literal["json_object", "json_schema", "tool_call"]
    json_schema: Optional[dict[str, Any]] = None
    tools: tuple[ToolSchema, ...] = ()
    tool_choice: Optional[str] = None  # "required" or a function name (kind tool_call)
    parallel_tool_calls: bool = True
    reasoning: bool = False

    @model_validator(mode="after")
    def _consistent(self) -> GrammarSpec:
        if self.kind == "json_schema" and self.json_schema is None:
            raise ValueError("json_schema: kind 'json_schema' needs a schema")
        if self.kind == "tool_call":
            if not self.tools:
                raise ValueError("tools: kind 'tool_call' needs at least one tool")
            names = [t.name for t in self.tools]
            if self.tool_choice != "required" and self.tool_choice not in names:
                raise ValueError(f"tool_choice: expected 'required' or one of {names}, got {self.tool_choice!r}")
        return self

    @cached_property
    def _key(self) -> str:
        return json.dumps(self.model_dump(mode="json"), sort_keys=True)

    def cache_key(self) -> str:
        """A stable text key: equal specs compile once (computed once per spec object)."""
        return self._key
