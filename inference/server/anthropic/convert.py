"""An Anthropic Messages request -> the internal chat request (messages, tools, tool_choice, thinking).

Content blocks map onto the GLM conversation: `thinking` -> the assistant's reasoning, `tool_use` ->
a tool call (same id), each `tool_result` -> a tool message, text -> content, `image` blocks (in user
content and tool results) -> image parts named `messages.i.content.j`. Thinking follows the
Messages API: off unless `thinking` asks for it; `budget_tokens` becomes an exact engine budget
plus the least effort level that covers it (the template's "Reasoning Effort" line).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from inference.chat.content_parts import ImagePart
from inference.chat.messages import Message, ToolCall
from inference.server.errors import APIError
from inference.server.protocol import ChatCompletionRequest, FunctionName, NamedToolChoice, TemplateKwargs
from inference.server.anthropic.protocol import (
    CountTokensRequest, DocumentBlock, ImageBlock, MessagesRequest, RedactedThinkingBlock, TextBlock,
    ThinkingAdaptive, ThinkingBlock, ThinkingEnabled, ToolChoiceAny, ToolChoiceNone, ToolChoiceTool,
    ToolResultBlock, ToolUseBlock,
)
from inference.server.turn import build_chat, effort_for_budget


@dataclass
class TurnPlan:
    """What the chat request does not carry: thinking on or off, its exact budget, a prefill."""

    enabled: bool
    budget: Optional[int] = None  # exact thinking tokens allowed (None: up to max_tokens)
    prefill: Optional[str] = None  # a final assistant message's text, which the reply continues


def to_chat(req: CountTokensRequest, engine, model: str) -> tuple[ChatCompletionRequest, TurnPlan]:
    plan, effort = _thinking(req, engine)
    forced = isinstance(req.tool_choice, (ToolChoiceAny, ToolChoiceTool))
    if forced and plan.enabled:
        raise APIError(400, "tool_choice: thinking may not be enabled when tool_choice forces tool use "
                       f"(type {req.tool_choice.type!r}); use tool_choice auto or disable thinking",
                       param="tool_choice")
    messages = _messages(req)
    if req.messages[-1].role == "assistant":
        plan.prefill = _prefill(req, messages.pop(), plan)
    fields = dict(
        model=model, messages=messages, tools=[_tool(t) for t in req.tools] if req.tools else None,
        tool_choice=_tool_choice(req), reasoning_effort=effort,
        chat_template_kwargs=TemplateKwargs(enable_thinking=plan.enabled),
    )
    if isinstance(req, MessagesRequest):
        fields.update(max_tokens=req.max_tokens, stop=req.stop_sequences or None, temperature=req.temperature,
                      top_p=req.top_p, top_k=req.top_k)
    return build_chat(**fields), plan


def _thinking(req: CountTokensRequest, engine) -> tuple[TurnPlan, Optional[str]]:
    effort = getattr(getattr(req, "output_config", None), "effort", None)
    if isinstance(req.thinking, ThinkingEnabled):
        return TurnPlan(True, req.thinking.budget_tokens), effort_for_budget(engine, req.thinking.budget_tokens)
    if isinstance(req.thinking, ThinkingAdaptive):
        return TurnPlan(True), effort
    return TurnPlan(False), None


def _tool(tool) -> dict:
    return {"type": "function", "function": {"name": tool.name, "description": tool.description,
                                             "parameters": tool.input_schema}}


def _tool_choice(req: CountTokensRequest):
    choice = req.tool_choice
    if choice is None:
        return None
    if isinstance(choice, ToolChoiceAny):
        return "required"
    if isinstance(choice, ToolChoiceTool):
        return NamedToolChoice(function=FunctionName(name=choice.name))
    if isinstance(choice, ToolChoiceNone):
        return "none"
    return "auto"


def system_text(system) -> Optional[str]:
    if system is None:
        return None
    if isinstance(system, str):
        return system
    return "\n\n".join(block.text for block in system)


def _messages(req: CountTokensRequest) -> list[Message]:
    out: list[Message] = []
    system = system_text(req.system)
    if system:
        out.append(Message.system(system))
    for i, msg in enumerate(req.messages):
        where = f"messages.{i}.content"
        if isinstance(msg.content, str):
            out.append(Message(role=msg.role, content=msg.content))
        elif msg.role == "system":
            out.append(Message.system("".join(_text_of(b, f"{where}.{j}") for j, b in enumerate(msg.content))))
        elif msg.role == "assistant":
            out.append(_assistant(msg.content, where))
        else:
            out.extend(_user(msg.content, where))
    return out


def _prefill(req: CountTokensRequest, last: Message, plan: TurnPlan) -> str:
    """The text of a final assistant message, which the reply continues (the API's prefill)."""
    where = f"messages.{len(req.messages) - 1}"
    if last.tool_calls or last.reasoning_content:
        raise APIError(400, f"{where}: a final assistant message can only hold text to continue, not "
                       "tool_use or thinking blocks", param=where)
    if plan.enabled:
        raise APIError(400, f"{where}: thinking cannot be enabled when the reply continues a final assistant "
                       "message (prefill)", param=where)
    if isinstance(req.tool_choice, (ToolChoiceAny, ToolChoiceTool)):
        raise APIError(400, f"{where}: a forced tool_choice cannot continue a final assistant message", param=where)
    text = last.content or ""
    if text != text.rstrip():
        raise APIError(400, f"{where}: final assistant content cannot end with trailing whitespace", param=where)
    return text


def _assistant(blocks, where: str) -> Message:
    reasoning, content, calls = [], [], []
    for j, block in enumerate(blocks):
        if isinstance(block, ThinkingBlock):
            reasoning.append(block.thinking)
        elif isinstance(block, RedactedThinkingBlock):
            continue  # encrypted by Anthropic; nothing a GLM model could read
        elif isinstance(block, TextBlock):
            content.append(block.text)
        elif isinstance(block, ToolUseBlock):
            calls.append(ToolCall(id=block.id, name=block.name, arguments=block.input))
        else:
            raise APIError(400, f"{where}.{j}: a {block.type!r} block cannot be in an assistant message",
                           param=f"{where}.{j}")
    return Message.assistant("".join(content), reasoning="".join(reasoning) or None, tool_calls=calls)


def _user(blocks, where: str) -> list[Message]:
    """Tool results become tool messages, text (and images) become user messages, in their order."""
    out: list[Message] = []
    text: list[str] = []
    images: list[ImagePart] = []

    def flush() -> None:
        if text or images:
            out.append(Message.user("".join(text), images or None))
            text.clear()
            images.clear()

    for j, block in enumerate(blocks):
        if isinstance(block, ToolResultBlock):
            flush()
            body, shots = _result(block, f"{where}.{j}.content")
            out.append(Message.tool(body, tool_call_id=block.tool_use_id, images=shots or None))
        elif isinstance(block, ImageBlock):
            images.append(_image(block, f"{where}.{j}", sum(map(len, text))))
        elif isinstance(block, (TextBlock, DocumentBlock)):
            text.append(_text_of(block, f"{where}.{j}"))
        else:
            raise APIError(400, f"{where}.{j}: a {block.type!r} block cannot be in a user message",
                           param=f"{where}.{j}")
    flush()
    return out


def _result(block: ToolResultBlock, where: str) -> tuple[str, list[ImagePart]]:
    """A tool_result's text and images (a screenshot a tool returned)."""
    prefix = "Error: " if block.is_error else ""
    if isinstance(block.content, str):
        return prefix + block.content, []
    pieces, images, length = [], [], len(prefix)
    for k, part in enumerate(block.content):
        if isinstance(part, ImageBlock):
            images.append(_image(part, f"{where}.{k}", length))
            continue
        piece = ("\n" if pieces else "") + _text_of(part, f"{where}.{k}")
        pieces.append(piece)
        length += len(piece)
    return prefix + "".join(pieces), images


def _image(block: ImageBlock, where: str, at: int) -> ImagePart:
    """base64 sources become data: URLs; a url source stays a URL (refused when decoded: no fetches)."""
    source = block.source
    kind = source.get("type")
    if kind == "base64" and isinstance(source.get("data"), str) and isinstance(source.get("media_type"), str):
        url = f"data:{source['media_type']};base64,{source['data']}"
    elif kind == "url" and isinstance(source.get("url"), str) and source["url"]:
        url = source["url"]
    else:
        raise APIError(400, f"{where}: image source type {kind!r} is not supported (expected base64 with "
                       "media_type and data)", param=where)
    return ImagePart(url=url, at=at, where=where)


def _text_of(block, where: str) -> str:
    if isinstance(block, TextBlock):
        return block.text
    if isinstance(block, DocumentBlock) and block.source.get("type") == "text":
        return str(block.source.get("data", ""))
    if isinstance(block, (ImageBlock, DocumentBlock)):
        raise APIError(400, f"{where}: {block.type!r} blocks with a {block.source.get('type')!r} source are not "
                       "supported here: the model reads text and images in user and tool_result content", param=where)
    raise APIError(400, f"{where}: a {block.type!r} block is not text", param=where)
