"""A chat request -> prompt ids, template options, sampling parameters and how to parse the reply."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

from inference.chat.content_parts import ImagePartError
from inference.chat.conversation import Conversation
from inference.chat.messages import ToolSpec
from inference.chat.template import ChatTemplate
from inference.chat.variants import normalize_reasoning_effort
from inference.grammar.spec import GrammarSpec
from inference.server.constraints import chat_spec
from inference.server.errors import APIError
from inference.server.images import message_images, refuse, text_only_error
from inference.server.protocol import ChatCompletionRequest, SamplingFields
from inference.server.sessions import SessionStore

# API effort words -> the engine's thinking-budget levels.
ENGINE_EFFORT = {"none": "none", "minimal": "low", "low": "low", "medium": "medium", "high": "high",
                 "xhigh": "max", "max": "max"}


@dataclass
class PreparedChat:
    prompt_ids: list[int]
    template: ChatTemplate
    tools: list[ToolSpec]
    parse_tools: bool  # False for tool_choice="none": tool-call markup stays text
    start_in_reasoning: bool
    grammar: Optional[GrammarSpec] = None  # forced tool calls, response_format
    prefill: str = ""  # reply text already written into the prompt (an Anthropic assistant prefill)
    engine_effort: Optional[str] = None
    conversation: Optional[Conversation] = None  # session state to record the reply into
    fingerprint: tuple = field(default_factory=tuple)
    images: list = field(default_factory=list)  # engine PromptImages of the prompt's image spans


@dataclass
class ServerDefaults:
    variant: str = "glm-5.2"
    clear_thinking: bool = False  # keep past reasoning: prompts stay extensions across user turns
    max_tokens: int = 4096


def prepare_chat(req: ChatCompletionRequest, tokenizer, defaults: ServerDefaults, sessions: SessionStore,
                 session_id: Optional[str], images=None) -> PreparedChat:
    """`images`: the engine's image inputs (`engine.vision`; None: image parts get a 400 naming them)."""
    kw = req.chat_template_kwargs
    word = (kw.reasoning_effort if kw and kw.reasoning_effort else None) or req.reasoning_effort
    try:
        effort = normalize_reasoning_effort(word)
    except ValueError as exc:
        raise APIError(400, str(exc), param="reasoning_effort", code="invalid_value") from None
    template = ChatTemplate(
        defaults.variant,
        enable_thinking=kw.enable_thinking if kw and kw.enable_thinking is not None else True,
        clear_thinking=kw.clear_thinking if kw and kw.clear_thinking is not None else defaults.clear_thinking,
        reasoning_effort=effort,
    )
    tools = req.tool_specs()
    grammar = chat_spec(req, tools, template.generation_starts_in_reasoning)
    engine_effort = ENGINE_EFFORT[word.strip().lower()] if word else None
    fingerprint = (repr(template), tuple(t.model_dump_json() for t in tools))
    # A template that drops past reasoning asks for a re-render; only otherwise extend the ids.
    keep_ids = session_id is not None and not template.drops_history_reasoning
    named = message_images(req.messages)
    if named and images is None:
        raise text_only_error(named[0][0])
    conv = sessions.take(session_id, fingerprint, req.messages) if keep_ids else None
    if conv is None:
        conv = Conversation(tokenizer, template, tools, req.messages, images=images)
    try:
        prompt_ids = conv.prompt_ids()
    except ImagePartError as exc:
        raise refuse(exc) from None
    return PreparedChat(
        # A JSON reply (response_format) is content only: markup inside its strings stays text.
        prompt_ids, template, tools, req.tool_choice != "none" and not (grammar and grammar.kind != "tool_call"),
        template.generation_starts_in_reasoning,
        grammar=grammar, engine_effort=engine_effort, conversation=conv if keep_ids else None, fingerprint=fingerprint,
        images=conv.prompt_images(),
    )


def sampling_params(req: SamplingFields, prompt_len: int, max_context: int, stop_ids: list[int],
                    defaults: ServerDefaults, logprobs: Optional[int], grammar: Optional[GrammarSpec] = None):
    from inference.engine.sampling_params import SamplingParams

    room = max_context - prompt_len
    if room < 1:
        raise APIError(400, f"messages: the prompt has {prompt_len} tokens; the model's context is "
                       f"{max_context} tokens", param="messages", code="context_length_exceeded")
    wanted = req.token_limit()
    if wanted is not None and wanted > room:
        raise APIError(400, f"max_tokens: {wanted} + {prompt_len} prompt tokens exceed the context of "
                       f"{max_context} tokens (at most {room} allowed)", param="max_tokens",
                       code="context_length_exceeded")
    return SamplingParams(
        temperature=1.0 if req.temperature is None else req.temperature,
        top_p=1.0 if req.top_p is None else req.top_p,
        top_k=req.top_k or 0,
        min_p=req.min_p or 0.0,
        seed=req.seed,
        max_tokens=wanted or min(room, defaults.max_tokens),
        stop_token_ids=[] if req.ignore_eos else list(stop_ids),
        ignore_eos=req.ignore_eos,
        stop=req.stop_strings(),
        logprobs=logprobs,
        presence_penalty=req.presence_penalty or 0.0,
        frequency_penalty=req.frequency_penalty or 0.0,
        repetition_penalty=1.0 if req.repetition_penalty is None else req.repetition_penalty,
        logit_bias={int(k): b for k, b in (req.logit_bias or {}).items()},
        grammar=grammar,
    )
