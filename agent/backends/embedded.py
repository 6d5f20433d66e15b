"""`embedded:PATH` — the in-process engine on a checkpoint folder.

The conversation is kept as token ids (`inference.chat.conversation.Conversation`): the ids of
each prompt are the previous prompt, the generated ids verbatim, then only the newly rendered
messages. So every turn is an exact prefix extension and the engine's prefix cache (and session
retention, keyed by `session_id`) serves all earlier turns. When the agent's history stops being
an extension (compaction, a changed tool list or effort), a new conversation and session start.
"""

from __future__ import annotations

import threading
import uuid
from pathlib import Path

from agent.backends.base import BackendError, BackendInterrupted, BackendResponse, ContextOverflow, OnDelta, Usage
from agent.backends.engine_pool import LoadedEngine, load_engine
from agent.config import EFFORT_ALIASES, EmbeddedConfig
from inference.chat.content_parts import ImagePartError
from inference.chat.conversation import Conversation
from inference.chat.messages import Message, ToolSpec
from inference.chat.parser import ContentDelta, FormatError, ReasoningDelta, StreamingParser, ToolCallEvent
from inference.chat.template import ChatTemplate
from inference.chat.variants import normalize_reasoning_effort


class EmbeddedBackend:
    """`shared`: an engine from an `EnginePool`, which owns it; without one the backend loads and owns its own."""

    def __init__(self, path: str | Path, config: EmbeddedConfig | None = None, shared: LoadedEngine | None = None):
        from inference.chat.template import detect_variant  # one rule for the server and the agent

        self.config = config or EmbeddedConfig()
        self._owns_engine = shared is None
        loaded = shared or load_engine(path, self.config.engine)
        self.engine, self.tokenizer = loaded.engine, loaded.tokenizer
        self.variant = self.config.variant or detect_variant(self.tokenizer.chat_template)
        # The engine's image inputs (a GLM-5.3-Flash checkpoint with its vision tower), else None.
        self.images = getattr(self.engine, "vision", None)
        self.supports_images = self.images is not None
        self.stop_ids = list(self.tokenizer.stop_token_ids)
        self.conversation: Conversation | None = None
        self.session_id: str | None = None
        self._fingerprint: tuple | None = None

    def complete(
        self,
        messages: list[Message],
        tools: list[ToolSpec],
        *,
        reasoning_effort: str | None = None,
        on_delta: OnDelta | None = None,
        cancel: threading.Event | None = None,
        max_tokens: int | None = None,
    ) -> BackendResponse:
        effort = EFFORT_ALIASES.get(reasoning_effort, reasoning_effort) if reasoning_effort else None
        # The engine gets the level itself (its thinking budget); the template only knows Low/High/Max,
        # and for `none` also opens no <think> where the variant can turn thinking off.
        template = ChatTemplate(
            self.variant, enable_thinking=self.config.enable_thinking and effort != "none", clear_thinking=False,
            reasoning_effort=normalize_reasoning_effort(effort),
        )
        if tools:
            conv, session = self._session(messages, template, tools)
        else:  # a side request (compaction summary): never disturbs the agent's session
            conv, session = Conversation(self.tokenizer, template, [], messages, images=self.images), None
        try:
            prompt = conv.prompt_ids()
        except ImagePartError as exc:  # e.g. over the engine's image limits; the agent checked decoding
            self.conversation = None
            raise BackendError(f"the engine refused an image: {exc}") from None
        room = self.engine.max_position - len(prompt)
        if room < 1:
            self.conversation = None  # the pending prompt is abandoned; the next call starts afresh
            raise ContextOverflow(f"the prompt has {len(prompt)} tokens; the model's context is {self.engine.max_position}")
        from inference.engine.request import EngineError, GenerateRequest
        from inference.engine.sampling_params import SamplingParams

        params = SamplingParams(
            temperature=self.config.temperature, top_p=self.config.top_p, seed=self.config.seed,
            max_tokens=min(max_tokens or self.config.max_new_tokens, room), stop_token_ids=self.stop_ids,
        )
        try:
            handle = self.engine.submit(GenerateRequest(
                prompt_ids=prompt, params=params, session_id=session, reasoning_effort=effort,
                images=conv.prompt_images(),
            ))
        except EngineError as exc:
            self.conversation = None
            raise BackendError(f"the engine refused the request: {exc}") from None
        parser = StreamingParser(tools, start_in_reasoning=template.generation_starts_in_reasoning)
        detok = self.tokenizer.detokenizer()
        reasoning, content, calls, errors = [], [], [], []

        def consume(events) -> None:
            for ev in events:
                if isinstance(ev, ReasoningDelta):
                    reasoning.append(ev.text)
                elif isinstance(ev, ContentDelta):
                    content.append(ev.text)
                elif isinstance(ev, ToolCallEvent):
                    calls.append(ev.call)
                elif isinstance(ev, FormatError):
                    errors.append(ev.message)
                if on_delta is not None and isinstance(ev, (ReasoningDelta, ContentDelta)):
                    on_delta("reasoning" if isinstance(ev, ReasoningDelta) else "content", ev.text)

        ids: list[int] = []
        usage, finish = None, None
        for delta in handle:
            if cancel is not None and cancel.is_set():
                self.engine.abort(handle.request_id)
                raise BackendInterrupted("interrupted while the model was generating")
            ids.extend(delta.token_ids)
            visible = [t for t in delta.token_ids if t not in self.stop_ids]  # the stop token is a role marker
            consume(parser.feed(detok.push(visible)))
            usage, finish = delta.usage or usage, delta.finish_reason or finish
        consume(parser.feed(detok.flush()))
        consume(parser.finish())
        message = Message.assistant("".join(content) or None, reasoning="".join(reasoning) or None, tool_calls=calls)
        conv.add_generated(ids, message)
        u = usage
        return BackendResponse(
            message=message,
            usage=Usage(prompt_tokens=u.prompt_tokens, cached_tokens=u.cached_tokens,
                        completion_tokens=u.completion_tokens) if u else Usage(),
            format_errors=errors,
            finish_reason={"stop": "tool_calls" if calls else "stop"}.get(finish or "", finish),
        )

    def _session(self, messages: list[Message], template: ChatTemplate, tools: list[ToolSpec]):
        """The kept conversation extended by the new messages, or a fresh one when it cannot be."""
        fingerprint = (repr(template), tuple(t.model_dump_json() for t in tools))
        conv = self.conversation
        if conv is not None and fingerprint == self._fingerprint and len(conv.messages) <= len(messages) \
                and conv.messages == messages[: len(conv.messages)] \
                and all(m.role != "assistant" for m in messages[len(conv.messages):]):
            conv.add(*messages[len(conv.messages):])
        else:
            conv = self.conversation = Conversation(self.tokenizer, template, tools, messages, images=self.images)
            self._fingerprint = fingerprint
            self.session_id = uuid.uuid4().hex
        return conv, self.session_id

    def close(self) -> None:
        if self._owns_engine:  # a shared engine is stopped by its pool, once every job is done
            self.engine.shutdown()
