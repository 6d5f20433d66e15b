"""Long-horizon context: token accounting and compaction in large, cache-friendly steps.

Between compactions the conversation only grows at the end, so every prompt extends the last one
and the serving engine's prefix cache hits. When the estimated context passes
`compact_trigger * context_window`, one compaction brings it down to `compact_target`:

1. elide: every tool observation in the middle (after the stable prefix, before the recent turns)
   is replaced by a one-line marker. The stable prefix (system prompt, tools, task, the first
   `keep_first_turns` turns) is never touched, so the cache stays valid up to the first change.
2. summarize: if that is not enough, the middle turns become one summary message written by the
   model (or, if the model fails, a deterministic list of the actions taken).

Because each compaction frees a large fraction of the window, the next one is many turns away.
The raw history is never lost: the trajectory keeps every message.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from agent.backends.base import BackendError, ModelBackend, Usage
from agent.config import ContextConfig
from agent.events import Compacted
from inference.chat.messages import Message

ELIDED_PREFIX = "[elided to save context:"
SUMMARY_HEADER = "[Summary of earlier work, written when the context was compacted]"
DEFAULT_TOKENS_PER_CHAR = 0.3  # conservative until a backend reports real prompt sizes

SUMMARY_INSTRUCTIONS = (
    "You are compacting the history of a coding agent's session so it can continue with a shorter "
    "context. Write a dense summary of the transcript below: what was learned about the code (files, "
    "functions, causes of failures), what was changed and where, commands and test results that "
    "matter, and what remains to be done. Keep exact paths, names and error messages. Do not call tools."
)


# An image's weight in the estimate: a 1280x800 screenshot is ~1,300 GLM-5.3-Flash image tokens.
IMAGE_CHARS = 6000


def message_chars(message: Message) -> int:
    n = len(message.content or "") + len(message.reasoning_content or "") + 16 + IMAGE_CHARS * len(message.images or [])
    for call in message.tool_calls or []:
        n += len(call.name) + len(json.dumps(call.arguments, ensure_ascii=False)) + 16
    return n


@dataclass
class Compaction:
    messages: list[Message]
    event: Compacted
    errors: list[str] = field(default_factory=list)
    usage: Usage | None = None  # of the summary request, if the model was asked


class ContextManager:
    def __init__(self, config: ContextConfig):
        self.config = config
        self.tokens_per_char = DEFAULT_TOKENS_PER_CHAR
        self._anchor: tuple[int, int] | None = None  # (n_messages, prompt_tokens) of the last call
        self._summary_usage: Usage | None = None

    # -- accounting ---------------------------------------------------------------------------
    def observe_usage(self, messages: list[Message], prompt_tokens: int) -> None:
        """Calibrate the estimate with the prompt size the backend reported for `messages`."""
        if prompt_tokens <= 0:
            return
        chars = sum(message_chars(m) for m in messages)
        self.tokens_per_char = max(0.05, min(1.0, prompt_tokens / max(chars, 1)))
        self._anchor = (len(messages), prompt_tokens)

    def estimate_tokens(self, messages: list[Message]) -> int:
        """Reported size of the last prompt plus an estimate for the messages added since."""
        if self._anchor is not None and self._anchor[0] <= len(messages):
            n, tokens = self._anchor
            return tokens + int(sum(message_chars(m) for m in messages[n:]) * self.tokens_per_char)
        return int(sum(message_chars(m) for m in messages) * self.tokens_per_char)

    # -- compaction ---------------------------------------------------------------------------
    def maybe_compact(
        self, messages: list[Message], last_context_tokens: int, backend: ModelBackend | None, force: bool = False
    ) -> Compaction | None:
        """Compact when over the trigger (or when `force`d after the model rejected the prompt)."""
        cfg = self.config
        before = max(self.estimate_tokens(messages), last_context_tokens)
        if before < cfg.compact_trigger * cfg.context_window and not force:
            return None
        start, end = self._middle(messages)
        if end <= start:
            return None
        target = cfg.compact_target * cfg.context_window
        elided = messages[:start] + [_elide(m) for m in messages[start:end]] + messages[end:]
        after = self._estimate_fresh(elided)
        if (after <= target and not (force and elided == messages)) or not cfg.summarize:
            return self._done(elided, "elide", before, after, [])
        self._summary_usage = None
        summary, errors = self._summarize(messages[start:end], backend)
        summarized = messages[:start] + [Message.user(f"{SUMMARY_HEADER}\n{summary}")] + messages[end:]
        done = self._done(summarized, "summarize", before, self._estimate_fresh(summarized), errors)
        done.usage = self._summary_usage
        return done

    def _done(self, messages, stage, before, after, errors) -> Compaction:
        self._anchor = None  # the last prompt size no longer describes the new list
        event = Compacted(
            stage=stage,
            tokens_before=before,
            tokens_after=after,
            messages=[m.model_dump(exclude_none=True) for m in messages],
        )
        return Compaction(messages=messages, event=event, errors=errors)

    def _estimate_fresh(self, messages: list[Message]) -> int:
        return int(sum(message_chars(m) for m in messages) * self.tokens_per_char)

    def _middle(self, messages: list[Message]) -> tuple[int, int]:
        """[start, end) of the compactable turns: after the stable prefix, before the recent turns.
        Both bounds sit on assistant messages, so tool results stay with their calls."""
        turns = [i for i, m in enumerate(messages) if m.role == "assistant"]
        task = next((i for i, m in enumerate(messages) if m.role == "user"), 0)
        turns = [i for i in turns if i > task]
        keep_first = self.config.keep_first_turns
        if len(turns) <= keep_first + 1:
            return 0, 0
        start = turns[keep_first] if keep_first < len(turns) else len(messages)
        # An earlier summary sits just before `start`; fold it into the next summary.
        summaries = [i for i, m in enumerate(messages) if i > task and _is_summary(m)]
        if summaries:
            start = min(start, summaries[-1])
        recent = min(self.config.keep_recent_turns, len(turns) - keep_first - 1)
        end = turns[-recent] if recent > 0 else len(messages)
        return start, max(start, end)

    def _summarize(self, middle: list[Message], backend: ModelBackend | None) -> tuple[str, list[str]]:
        transcript = _transcript(middle, limit_chars=int(self.config.context_window / self.tokens_per_char * 0.4))
        if backend is not None:
            request = [
                Message.system(SUMMARY_INSTRUCTIONS),
                Message.user(f"<transcript>\n{transcript}\n</transcript>\n\nWrite the summary now."),
            ]
            try:
                response = backend.complete(request, [], max_tokens=self.config.summary_max_tokens)
                self._summary_usage = response.usage
                text = (response.message.content or "").strip()
                if text and not response.format_errors and not response.message.tool_calls:
                    return text, []
                error = "the model's summary was empty or malformed"
            except BackendError as exc:
                error = f"summarization failed ({exc})"
        else:
            error = "no model to summarize with"
        return _action_list(middle), [f"{error}; used a list of the actions taken instead"]


def _is_summary(message: Message) -> bool:
    return message.role == "user" and (message.content or "").startswith(SUMMARY_HEADER)


def _elide(message: Message) -> Message:
    text = message.content or ""
    if message.role == "tool" and message.images:  # an old screenshot: the text stays, the image goes
        return message.model_copy(update={"content": f"{text}\n{ELIDED_PREFIX} {len(message.images)} image(s)]",
                                          "images": None})
    if message.role != "tool" or len(text) < 240 or text.startswith(ELIDED_PREFIX):
        return message
    lines = text.count("\n") + 1
    first = text.strip().splitlines()[0][:120] if text.strip() else ""
    marker = f"{ELIDED_PREFIX} {len(text)} chars, {lines} lines; began: {first!r}]"
    return message.model_copy(update={"content": marker})


def _transcript(messages: list[Message], limit_chars: int) -> str:
    parts = []
    for m in messages:
        if m.role == "assistant":
            if m.content:
                parts.append(f"ASSISTANT: {m.content.strip()[:2000]}")
            for call in m.tool_calls or []:
                parts.append(f"CALL {call.name} {json.dumps(call.arguments, ensure_ascii=False)[:1500]}")
        else:
            parts.append(f"{m.role.upper()}: {(m.content or '')[:3000]}")
    text = "\n".join(parts)
    if len(text) > limit_chars:
        half = limit_chars // 2
        text = text[:half] + "\n[... middle of the transcript cut ...]\n" + text[-half:]
    return text


def _action_list(messages: list[Message]) -> str:
    """Deterministic fallback summary: each tool call and the first line of its result."""
    results = {m.tool_call_id: (m.content or "").strip() for m in messages if m.role == "tool"}
    lines = []
    for m in messages:
        if _is_summary(m):
            lines.append(m.content.removeprefix(SUMMARY_HEADER).strip())
        for call in m.tool_calls or [] if m.role == "assistant" else []:
            args = json.dumps(call.arguments, ensure_ascii=False)
            outcome = results.get(call.id, "").splitlines()[:1]
            lines.append(f"- {call.name} {args[:200]} -> {outcome[0][:160] if outcome else '(no output)'}")
    return "Actions taken so far (the model summary was unavailable):\n" + "\n".join(lines)
