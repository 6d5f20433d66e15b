"""Responses input items -> chat messages, and a Responses request -> the internal chat request.

An assistant turn is the run of `reasoning`, assistant `message` and `function_call` items between
two user/tool items: its reasoning, text and calls become one assistant message, which is how the
GLM template renders a turn. `function_call_output` items become tool messages (same call ids).
"""

from __future__ import annotations

import json
from typing import Optional

from inference.chat.content_parts import ImagePart
from inference.chat.messages import Message, ToolCall
from inference.server.errors import APIError
from inference.server.protocol import ChatCompletionRequest, FunctionName, NamedToolChoice
from inference.server.responses.protocol import (
    FilePart, FunctionCallItem, FunctionCallOutputItem, FunctionChoice, InputImagePart, MessageItem, ReasoningItem,
    RefusalPart, ResponsesRequest,
)
from inference.server.turn import build_chat


def input_messages(req: ResponsesRequest) -> list[Message]:
    if isinstance(req.input, str):
        return [Message.user(req.input)]
    out: list[Message] = []
    turn: Optional[dict] = None  # the assistant turn being collected

    def flush() -> None:
        nonlocal turn
        if turn is not None:
            out.append(Message.assistant("".join(turn["text"]), reasoning="".join(turn["reasoning"]) or None,
                                         tool_calls=turn["calls"]))
            turn = None

    for i, item in enumerate(req.input):
        where = f"input.{i}"
        assistant_side = isinstance(item, (ReasoningItem, FunctionCallItem)) or (
            isinstance(item, MessageItem) and item.role == "assistant")
        if not assistant_side:
            flush()
            if isinstance(item, FunctionCallOutputItem):
                text, images = _content(item.output, f"{where}.output")
                out.append(Message.tool(text, tool_call_id=item.call_id, images=images or None))
            else:
                role = "user" if item.role == "user" else "system"  # developer instructions are system text
                text, images = _content(item.content, f"{where}.content", images=role == "user")
                out.append(Message(role=role, content=text, images=images or None))
            continue
        # A new turn starts with reasoning after text or calls, or with text after calls.
        if turn is not None and ((isinstance(item, ReasoningItem) and (turn["text"] or turn["calls"]))
                                 or (isinstance(item, MessageItem) and turn["calls"])):
            flush()
        if turn is None:
            turn = {"reasoning": [], "text": [], "calls": []}
        if isinstance(item, ReasoningItem):
            parts = item.content if item.content else item.summary  # the summary stands in for hidden reasoning
            turn["reasoning"].append("".join(p.text for p in parts))
        elif isinstance(item, MessageItem):
            turn["text"].append(_text(item.content, f"{where}.content"))
        else:
            turn["calls"].append(ToolCall(id=item.call_id, name=item.name, arguments=_arguments(item, where)))
    flush()
    return out


def to_chat(req: ResponsesRequest, messages: list[Message], model: str) -> ChatCompletionRequest:
    fmt = req.text.format if req.text and req.text.format else None
    return build_chat(
        model=model, messages=messages, tools=[_tool(t) for _, t in req.function_tools()] or None,
        tool_choice=_tool_choice(req.tool_choice), reasoning_effort=req.reasoning.effort if req.reasoning else None,
        max_tokens=req.max_output_tokens, temperature=req.temperature, top_p=req.top_p,
        # text.format maps onto response_format: structured outputs apply wherever chat supports them.
        response_format=None if fmt is None else _response_format(fmt),
    )


def _response_format(fmt) -> dict:
    extra = dict(fmt.model_extra or {})
    if fmt.type != "json_schema":
        return {"type": fmt.type}
    return {"type": "json_schema", "json_schema": extra}


def _tool(tool) -> dict:
    return {"type": "function", "function": {"name": tool.name, "description": tool.description or "",
                                             "parameters": tool.parameters or {"type": "object", "properties": {}}}}


def _tool_choice(choice):
    if isinstance(choice, FunctionChoice):
        return NamedToolChoice(function=FunctionName(name=choice.name))
    return choice


def _text(content, where: str) -> str:
    return _content(content, where, images=False)[0]


def _content(content, where: str, images: bool = True) -> tuple[str, list[ImagePart]]:
    """Parts -> (text, images at their offsets); `images=False` where a message cannot hold them."""
    if isinstance(content, str):
        return content, []
    pieces: list[str] = []
    found: list[ImagePart] = []
    for k, part in enumerate(content):
        name = f"{where}.{k}"
        if isinstance(part, InputImagePart) and images:
            if not part.image_url:
                raise APIError(400, f"{name}: input_image needs image_url (a data:image/...;base64, URL); "
                               "file_id is not supported (no files API)", param=name)
            found.append(ImagePart(url=part.image_url, at=sum(map(len, pieces)), where=name))
        elif isinstance(part, (FilePart, InputImagePart)):
            what = "here (only user messages and function_call_output take images)" if isinstance(
                part, InputImagePart) else "(the model reads text and images)"
            raise APIError(400, f"{name}: {part.type!r} parts are not supported {what}", param=name)
        else:
            pieces.append(part.refusal if isinstance(part, RefusalPart) else part.text)
    return "".join(pieces), found


def _arguments(item: FunctionCallItem, where: str) -> dict:
    try:
        args = json.loads(item.arguments) if item.arguments.strip() else {}
    except json.JSONDecodeError as exc:
        raise APIError(400, f"{where}.arguments: not valid JSON ({exc}): {item.arguments[:80]!r}",
                       param=f"{where}.arguments") from None
    if not isinstance(args, dict):
        raise APIError(400, f"{where}.arguments: expected a JSON object, got {type(args).__name__}",
                       param=f"{where}.arguments")
    return args

