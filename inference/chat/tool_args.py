"""GLM tool-call bodies -> ToolCall: `name<arg_key>k</arg_key><arg_value>v</arg_value>...`.

Values are converted by the tool's JSON schema: string parameters stay raw text, everything else is
JSON-decoded (glm5-model.md §E.3). Also accepts the `name>{json}` form some GLM builds emit.
"""

from __future__ import annotations

import json
import re
import uuid
from typing import Any

from inference.chat.messages import ToolCall, ToolSpec

_PAIR = re.compile(r"<arg_key>(.*?)</arg_key>\s*<arg_value>(.*?)</arg_value>", re.DOTALL)
_JSON_FORM = re.compile(r"\s*([^\s<>{}]+?)\s*>?\s*(\{.*)", re.DOTALL)
_NAME = re.compile(r"[^\s<>{}\"']+")


class ToolCallFormatError(ValueError):
    """A tool call the model wrote that cannot be turned into a ToolCall; the message says why."""


def new_call_id() -> str:
    return "call_" + uuid.uuid4().hex[:24]


def parse_tool_call(body: str, tools: dict[str, ToolSpec] | None, strip_values: bool = False) -> ToolCall:
    """Parse the text between <tool_call> and </tool_call>; raises ToolCallFormatError.
    `strip_values`: whitespace around a value is not part of it, which is how the tool-call
    grammar of constrained decoding (xgrammar's `glm_xml` style) reads it."""
    first_key = body.find("<arg_key>")
    if first_key >= 0:
        name = body[:first_key].strip()
        rest = body[first_key:]
        pairs = _PAIR.findall(rest)
        leftover = _PAIR.sub("", rest)
        if leftover.strip():
            raise ToolCallFormatError(
                f"tool call {name!r}: malformed arguments near {leftover.strip()[:60]!r}; expected "
                "<arg_key>KEY</arg_key><arg_value>VALUE</arg_value> pairs"
            )
        raw_args: dict[str, Any] = {}
        for key, value in pairs:
            raw_args[key.strip()] = value.strip() if strip_values else value
        spec = _check_name(name, tools)
        return ToolCall(id=new_call_id(), name=name, arguments=_convert(name, spec, raw_args))
    match = _JSON_FORM.fullmatch(body)
    if match:
        name, text = match.groups()
        try:
            args = json.loads(text)
        except json.JSONDecodeError as exc:
            raise ToolCallFormatError(f"tool call {name!r}: arguments are not valid JSON ({exc})") from exc
        if not isinstance(args, dict):
            raise ToolCallFormatError(f"tool call {name!r}: arguments must be a JSON object")
        _check_name(name, tools)
        return ToolCall(id=new_call_id(), name=name, arguments=args)
    name = body.strip()
    if not _NAME.fullmatch(name):
        raise ToolCallFormatError(f"tool call: cannot read a function name from {body.strip()[:60]!r}")
    _check_name(name, tools)
    return ToolCall(id=new_call_id(), name=name, arguments={})


def _check_name(name: str, tools: dict[str, ToolSpec] | None) -> ToolSpec | None:
    if not name:
        raise ToolCallFormatError("tool call: the function name is empty")
    if tools is None:
        return None
    if name not in tools:
        raise ToolCallFormatError(f"tool call: unknown tool {name!r}; available tools: {sorted(tools)}")
    return tools[name]


def _types(spec: ToolSpec | None, key: str) -> set[str] | None:
    declared = spec.parameter_type(key) if spec else None
    if declared is None:
        return None
    return {declared} if isinstance(declared, str) else {t for t in declared if isinstance(t, str)}


def _convert(name: str, spec: ToolSpec | None, raw_args: dict[str, str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, raw in raw_args.items():
        types = _types(spec, key)
        if types is not None and types <= {"string", "null"} and "string" in types:
            out[key] = raw
            continue
        try:
            out[key] = json.loads(raw)
        except json.JSONDecodeError:
            if types is None or "string" in types:
                out[key] = raw  # no schema to say otherwise: keep the text
            else:
                expected = "/".join(sorted(types))
                raise ToolCallFormatError(
                    f"tool call {name!r}: argument {key!r} must be JSON of type {expected}; got {raw[:80]!r}"
                ) from None
    return out
