"""GLM-5.x chat rendering: messages + tools -> prompt text (glm5-model.md §E.2, §E.3).

The renderer works message by message (`render_pieces`) so that `Conversation` can render only
the messages that are new since the last prompt. The equivalent Jinja files under templates/ are
what a checkpoint ships; tests check that transformers' apply_chat_template agrees with this code.
"""

from __future__ import annotations

import json
from importlib import resources
from typing import Any, Iterable

from inference.chat.content_parts import ImagePart, with_placeholders
from inference.chat.messages import Message, ToolCall, ToolSpec
from inference.chat.variants import EFFORT_LABELS, VARIANTS, TemplateStyle, get_style

PROMPT_START = "[gMASK]<sop>"

TOOLS_HEADER = (
    "<|system|>\n# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
    "You are provided with function signatures within <tools></tools> XML tags:\n<tools>\n"
)
TOOLS_FOOTER = (
    "</tools>\n\nFor each function call, output the function name and arguments within the following "
    "XML format:\n<tool_call>{function-name}<arg_key>{arg-key-1}</arg_key><arg_value>{arg-value-1}"
    "</arg_value>...</tool_call>"
)


def to_json(value: Any) -> str:
    """JSON as the templates' `tojson(ensure_ascii=False)` writes it (", " and ": " separators)."""
    return json.dumps(value, ensure_ascii=False)


def render_tool_call(call: ToolCall) -> str:
    args = "".join(
        f"<arg_key>{key}</arg_key><arg_value>{value if isinstance(value, str) else to_json(value)}</arg_value>"
        for key, value in call.arguments.items()
    )
    return f"<tool_call>{call.name}{args}</tool_call>"


def split_reasoning(message: Message) -> tuple[str, str]:
    """(reasoning, content): reasoning_content when given, else the text before `</think>` in content."""
    content = message.content or ""
    if message.reasoning_content is not None:
        return message.reasoning_content, content
    if "</think>" in content:
        before, _, after = content.rpartition("</think>")
        return before.split("<think>")[-1], after
    return "", content


def coerce_messages(messages: Iterable[Message | dict]) -> list[Message]:
    return [m if isinstance(m, Message) else Message.model_validate(m) for m in messages]


def coerce_tools(tools: Iterable[ToolSpec | dict] | None) -> list[ToolSpec]:
    return [t if isinstance(t, ToolSpec) else ToolSpec.from_openai(t) for t in tools or []]


class ChatTemplate:
    """One GLM-5.x template generation with its options.

    clear_thinking=False (default) keeps the reasoning of every past assistant turn, which keeps
    prompts token-exact extensions across user turns; None means "the variant's own default".
    """

    def __init__(
        self,
        variant: str = "glm-5.2",
        enable_thinking: bool = True,
        clear_thinking: bool | None = False,
        reasoning_effort: str | None = None,
    ):
        self.style: TemplateStyle = get_style(variant)
        self.variant = variant
        if reasoning_effort is not None and reasoning_effort not in EFFORT_LABELS:
            raise ValueError(
                f"reasoning_effort: got {reasoning_effort!r}; expected one of {sorted(EFFORT_LABELS)} or None "
                "(map API words with normalize_reasoning_effort)"
            )
        self.enable_thinking = enable_thinking
        self.clear_thinking = clear_thinking
        self.reasoning_effort = reasoning_effort

    def __repr__(self) -> str:
        return (
            f"ChatTemplate({self.variant!r}, enable_thinking={self.enable_thinking}, "
            f"clear_thinking={self.clear_thinking}, reasoning_effort={self.reasoning_effort!r})"
        )

    # -- whole prompts -------------------------------------------------------------------------

    def render(
        self, messages: Iterable[Message | dict], tools: Iterable[ToolSpec | dict] | None = None,
        add_generation_prompt: bool = True,
    ) -> str:
        msgs = coerce_messages(messages)
        text = self.render_prefix(tools) + "".join(self.render_pieces(msgs))
        return text + self.generation_prompt() if add_generation_prompt else text

    def render_prefix(self, tools: Iterable[ToolSpec | dict] | None = None) -> str:
        """Everything before the first message: [gMASK]<sop>, the effort line, the tools block."""
        text = PROMPT_START
        if self.style.effort_line:
            text += f"<|system|>Reasoning Effort: {EFFORT_LABELS[self.reasoning_effort or 'max']}"
        specs = coerce_tools(tools)
        if specs:
            dumps = [s.to_openai() if self.style.tool_json == "openai" else s.function_dict() for s in specs]
            text += TOOLS_HEADER + "".join(to_json(d) + "\n" for d in dumps) + TOOLS_FOOTER
        return text

    def generation_prompt(self) -> str:
        if not self.enable_thinking and self.style.thinking_off_prompt is not None:
            return "<|assistant|>" + self.style.thinking_off_prompt
        return "<|assistant|><think>"

    @property
    def generation_starts_in_reasoning(self) -> bool:
        """Whether generated text begins inside a <think> block (the parser needs to know)."""
        return self.generation_prompt().endswith("<think>")

    # -- per message ---------------------------------------------------------------------------

    def render_pieces(self, messages: list[Message]) -> list[str]:
        """One text piece per message; a tool message's piece carries its run's <|observation|>."""
        last_user = max((i for i, m in enumerate(messages) if m.role == "user"), default=-1)
        order = self._tool_result_order(messages)
        pieces = []
        for i, m in enumerate(messages):
            if m.role == "system":
                pieces.append("<|system|>" + (m.content or ""))
            elif m.role == "user":
                pieces.append("<|user|>" + with_placeholders(m.content or "", m.images))
            elif m.role == "assistant":
                pieces.append(self._render_assistant(m, keep_reasoning=i > last_user or not self._clear()))
            else:
                shown = messages[order[i]]
                opens_run = i == 0 or messages[i - 1].role != "tool"
                body = f"<tool_response>{with_placeholders(shown.content or '', shown.images)}</tool_response>"
                pieces.append(("<|observation|>" if opens_run else "") + body)
        return pieces

    def images_in_order(self, messages: list[Message], start: int = 0) -> list[tuple[int, ImagePart]]:
        """(message index, image) of the pieces from `start` on, in the order render_pieces writes
        their placeholders (tool results may be reordered)."""
        order = self._tool_result_order(messages)
        shown = [order[i] if messages[i].role == "tool" else i for i in range(start, len(messages))]
        return [(j, part) for j in shown for part in messages[j].images or []]

    def _clear(self) -> bool:
        return self.style.clear_thinking_default if self.clear_thinking is None else self.clear_thinking

    @property
    def drops_history_reasoning(self) -> bool:
        """Whether a new user message makes earlier turns lose their reasoning (prefix reuse breaks)."""
        return self._clear()

    def _render_assistant(self, m: Message, keep_reasoning: bool) -> str:
        reasoning, content = split_reasoning(m)
        if self.style.strip_reasoning:
            reasoning = reasoning.strip()
        think = f"<think>{reasoning}</think>" if keep_reasoning and reasoning else self.style.empty_think
        calls = "".join(render_tool_call(tc) for tc in m.tool_calls or [])
        return "<|assistant|>" + think + content.strip() + calls

    def _tool_result_order(self, messages: list[Message]) -> list[int]:
        """order[i] = index of the tool message rendered at position i (identity unless reordered)."""
        order = list(range(len(messages)))
        if not self.style.reorder_tool_results:
            return order
        i = 0
        while i < len(messages):
            if messages[i].role != "tool":
                i += 1
                continue
            start = i
            while i < len(messages) and messages[i].role == "tool":
                i += 1
            prev = messages[start - 1] if start > 0 else None
            call_ids = [tc.id for tc in (prev.tool_calls or [])] if prev and prev.role == "assistant" else []
            run_ids = [messages[j].tool_call_id for j in range(start, i)]
            # Only a clean permutation of a subset of the call ids can be reordered unambiguously.
            if call_ids and all(r in call_ids for r in run_ids) and len(set(run_ids)) == len(run_ids):
                ranked = sorted(range(start, i), key=lambda j: call_ids.index(messages[j].tool_call_id))
                order[start:i] = ranked
        return order

    # -- the Jinja equivalent ------------------------------------------------------------------

    def jinja_source(self) -> str:
        """The shipped chat_template.jinja for this variant."""
        name = f"{self.style.name}.jinja"
        return resources.files("inference.chat").joinpath("templates", name).read_text(encoding="utf-8")

    def template_kwargs(self) -> dict[str, Any]:
        """Keyword arguments that make the Jinja template render exactly what `render` does."""
        kwargs: dict[str, Any] = {"enable_thinking": self.enable_thinking}
        if self.clear_thinking is not None:
            kwargs["clear_thinking"] = self.clear_thinking
        if self.reasoning_effort is not None:
            kwargs["reasoning_effort"] = self.reasoning_effort
        return kwargs


def detect_variant(chat_template: str | None) -> str:
    """Which GLM-5.x template generation a checkpoint's chat_template.jinja is."""
    if chat_template:
        for name in VARIANTS:
            if chat_template == ChatTemplate(name).jinja_source():
                return name
        if "Reasoning Effort" in chat_template:
            if "<think></think>" in chat_template:
                return "glm-5.3-flash"
            return "glm-5.2" if "enable_thinking" in chat_template else "glm-5.3"
        return "glm-5"
    return "glm-5.2"
