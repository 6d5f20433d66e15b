"""Request fields -> the engine's GrammarSpec: `response_format` and forced `tool_choice`.

`tool_choice: "required"` or a named function constrains the reply to GLM tool calls whose
arguments follow the tools' JSON schemas (xgrammar's GLM-5 grammar), so a forced call always
parses; `parallel_tool_calls: false` allows exactly one. `response_format` `json_object` /
`json_schema` constrains the reply's content to JSON. When the prompt opens `<think>`, the
reasoning stays free text and the constraint starts after `</think>`. Other front-ends
(Anthropic Messages, Responses) build the same specs with `forced_tool_spec`.
"""

from __future__ import annotations

import asyncio
from typing import Optional

from inference.chat.messages import ToolSpec
from inference.grammar.spec import GrammarSpec, ToolSchema
from inference.server.errors import APIError
from inference.server.protocol import ChatCompletionRequest, NamedToolChoice, SamplingFields


def forced_tool_spec(tools: list[ToolSpec], choice: str, parallel: bool = True,
                     reasoning: bool = False) -> GrammarSpec:
    """Tool calls only: `choice` is "required" (any of tools) or one tool's name."""
    return GrammarSpec(kind="tool_call", tools=tuple(ToolSchema(name=t.name, parameters=t.parameters) for t in tools),
                       tool_choice=choice, parallel_tool_calls=parallel, reasoning=reasoning)


def response_format_spec(body: SamplingFields, reasoning: bool = False) -> Optional[GrammarSpec]:
    fmt = body.response_format
    if fmt is None or fmt.type == "text":
        return None
    if fmt.type == "json_object":
        return GrammarSpec(kind="json_object", reasoning=reasoning)
    return GrammarSpec(kind="json_schema", json_schema=fmt.json_schema.schema_, reasoning=reasoning)


def forced_choice(body: ChatCompletionRequest, tools: list[ToolSpec]) -> Optional[str]:
    """"required", a tool's name, or None when the request does not force a call."""
    choice = body.tool_choice
    if choice != "required" and not isinstance(choice, NamedToolChoice):
        return None
    if not tools:
        raise APIError(400, f"tool_choice: {choice!r} needs a non-empty tools list", param="tool_choice")
    if choice == "required":
        return "required"
    if choice.function.name not in {t.name for t in tools}:
        raise APIError(400, f"tool_choice: function {choice.function.name!r} is not in tools "
                       f"{sorted(t.name for t in tools)}", param="tool_choice.function.name")
    return choice.function.name


def chat_spec(body: ChatCompletionRequest, tools: list[ToolSpec], reasoning: bool) -> Optional[GrammarSpec]:
    choice = forced_choice(body, tools)
    fmt = response_format_spec(body, reasoning)
    if choice is not None and fmt is not None:
        raise APIError(400, f"response_format: {body.response_format.type!r} and tool_choice {choice!r} both "
                       "constrain the reply; send one of them", param="response_format")
    if choice is not None:
        return forced_tool_spec(tools, choice, body.parallel_tool_calls is not False, reasoning)
    return fmt


async def compile_spec(engine, spec: Optional[GrammarSpec]) -> None:
    """Compile on a worker thread (so the event loop never waits on the grammar compiler); a spec
    that cannot be compiled is a 400 naming `tools` or `response_format`."""
    if spec is None:
        return
    param = "tools" if spec.kind == "tool_call" else "response_format"
    from inference.engine.request import EngineError

    try:
        await asyncio.to_thread(engine.compile_grammar, spec)
    except EngineError as exc:
        raise APIError(400, f"{param}: {exc}".replace("params.grammar: ", ""), param=param,
                       code="invalid_value") from None
