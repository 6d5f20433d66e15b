"""What differs between the GLM-5.x chat-template generations (glm5-model.md §E.2).

Each variant is a small set of traits; `template.py` renders all of them with one code path and
`templates/<variant>.jinja` is the equivalent Jinja file a checkpoint ships.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal


@dataclass(frozen=True)
class TemplateStyle:
    name: str
    # `<|system|>Reasoning Effort: Low|High|Max` right after [gMASK]<sop> (5.2 and later).
    effort_line: bool
    # What clear_thinking means when the caller leaves it unset: GLM-5/5.1/5.2 drop the reasoning of
    # turns before the last user message; 5.3 keeps it ("preserved thinking").
    clear_thinking_default: bool
    # GLM-5 strips history reasoning; 5.3-Flash renders it verbatim.
    strip_reasoning: bool
    # History marker for a turn whose reasoning is dropped or empty.
    empty_think: str
    # Generation prompt after <|assistant|> when thinking is off (None: thinking cannot be turned off).
    thinking_off_prompt: str | None
    # Tools block lists the whole OpenAI tool object or only the inner function object.
    tool_json: Literal["openai", "function"]
    # Tool results are put in the order of the preceding assistant's tool_calls when ids allow.
    reorder_tool_results: bool


VARIANTS: dict[str, TemplateStyle] = {
    "glm-5": TemplateStyle("glm-5", False, True, True, "</think>", "</think>", "openai", False),
    "glm-5.2": TemplateStyle("glm-5.2", True, True, True, "</think>", "</think>", "openai", False),
    "glm-5.3": TemplateStyle("glm-5.3", True, False, True, "</think>", None, "openai", False),
    "glm-5.3-flash": TemplateStyle("glm-5.3-flash", True, False, False, "<think></think>", "<think></think>", "function", True),
}
ALIASES = {"glm-5.1": "glm-5"}

EFFORT_LABELS = {"low": "Low", "high": "High", "max": "Max"}

# OpenAI-style effort words mapped onto what the GLM templates understand (glm5-model.md §E.2).
_EFFORT_WORDS = {
    "none": "low", "minimal": "low", "low": "low",
    "medium": "high", "high": "high",
    "xhigh": "max", "max": "max",
}


def get_style(variant: str) -> TemplateStyle:
    key = ALIASES.get(variant, variant)
    if key not in VARIANTS:
        known = sorted([*VARIANTS, *ALIASES])
        raise ValueError(f"variant: unknown chat template variant {variant!r}; expected one of {known}")
    return VARIANTS[key]


def normalize_reasoning_effort(value: str | None) -> str | None:
    """Map an API effort word (none/minimal/low/medium/high/xhigh/max) to low|high|max."""
    if value is None:
        return None
    key = value.strip().lower()
    if key not in _EFFORT_WORDS:
        raise ValueError(f"reasoning_effort: got {value!r}; expected one of {sorted(_EFFORT_WORDS)}")
    return _EFFORT_WORDS[key]
