"""OpenAI response and stream-chunk bodies for chat and text completions."""

from __future__ import annotations

import json
import time
import uuid
from typing import Any, Optional

from inference.chat.messages import Message, ToolCall
from inference.chat.parser import ContentDelta, FormatError, ReasoningDelta, ToolCallEvent


def new_id(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:24]}"


def usage_body(usage) -> dict[str, Any]:
    return {
        "prompt_tokens": usage.prompt_tokens,
        "completion_tokens": usage.completion_tokens,
        "total_tokens": usage.prompt_tokens + usage.completion_tokens,
        "prompt_tokens_details": {
            "cached_tokens": usage.cached_tokens,
            "cached_tokens_device": usage.cached_tokens_device,
            "cached_tokens_host": usage.cached_tokens_host,
        },
    }


def finish_reason(engine_reason: Optional[str], has_tool_calls: bool) -> str:
    if engine_reason == "length":
        return "length"
    return "tool_calls" if has_tool_calls else "stop"


class ChatReply:
    """Collects parse events into the assistant message; turns each event into a stream delta."""

    def __init__(self, model: str, index: int = 0, reply_id: str | None = None, created: int | None = None):
        self.index = index  # the choice this reply is (n > 1 shares one id and timestamp)
        self.id = reply_id or new_id("chatcmpl")
        self.created = created or int(time.time())
        self.model = model
        self.reasoning = ""
        self.content = ""
        self.tool_calls: list[ToolCall] = []
        self.format_errors: list[str] = []
        self.logprobs: list[dict] = []

    def add(self, event) -> None:
        """Record one parse event into the message."""
        if isinstance(event, ReasoningDelta):
            self.reasoning += event.text
        elif isinstance(event, ContentDelta):
            self.content += event.text
        elif isinstance(event, ToolCallEvent):
            self.tool_calls.append(event.call)
        elif isinstance(event, FormatError):
            # The model's malformed text goes back as content, so the client sees what it wrote.
            self.format_errors.append(event.message)
            self.content += event.raw or ""

    def delta(self, event) -> Optional[dict[str, Any]]:
        """The stream `delta` of an event `add` recorded (None: nothing to send)."""
        if isinstance(event, ReasoningDelta):
            # vLLM's current name and the older one that GLM's API and many clients still read.
            return {"reasoning": event.text, "reasoning_content": event.text}
        if isinstance(event, ContentDelta):
            return {"content": event.text}
        if isinstance(event, ToolCallEvent):
            index = next(i for i, call in enumerate(self.tool_calls) if call is event.call)
            return {"tool_calls": [{"index": index, **event.call.to_openai()}]}
        if isinstance(event, FormatError) and event.raw:
            return {"content": event.raw}
        return None

    def message(self) -> Message:
        return Message.assistant(self.content, reasoning=self.reasoning or None, tool_calls=self.tool_calls)

    def message_body(self) -> dict[str, Any]:
        body: dict[str, Any] = {"role": "assistant", "content": self.content,
                                "reasoning": self.reasoning or None, "reasoning_content": self.reasoning or None}
        if self.tool_calls:
            body["tool_calls"] = [c.to_openai() for c in self.tool_calls]
        if self.format_errors:
            body["format_errors"] = self.format_errors
        return body

    def response(self, engine_reason: Optional[str], usage) -> dict[str, Any]:
        choice = {"index": self.index, "message": self.message_body(),
                  "finish_reason": finish_reason(engine_reason, bool(self.tool_calls)),
                  "logprobs": {"content": self.logprobs} if self.logprobs else None}
        return {"id": self.id, "object": "chat.completion", "created": self.created, "model": self.model,
                "choices": [choice], "usage": usage_body(usage)}

    def chunk(self, delta: dict[str, Any], reason: Optional[str] = None, usage=None, final: bool = False,
              logprobs: Optional[list[dict]] = None) -> str:
        """One chunk; `logprobs`: the entries of the tokens this chunk's text came from."""
        choices = [] if usage is not None and not delta and not final else [
            {"index": self.index, "delta": delta, "finish_reason": reason,
             "logprobs": {"content": logprobs} if logprobs else None}]
        body: dict[str, Any] = {"id": self.id, "object": "chat.completion.chunk", "created": self.created,
                                "model": self.model, "choices": choices}
        if usage is not None:
            body["usage"] = usage_body(usage)
        return sse(body)

    def usage_chunk(self, usage: dict[str, Any]) -> str:
        """The closing usage-only chunk, from an already built usage body (n > 1 merges them)."""
        return sse({"id": self.id, "object": "chat.completion.chunk", "created": self.created, "model": self.model,
                    "choices": [], "usage": usage})


def _token_bytes(tokenizer, token_id: int) -> bytes:
    table = tokenizer.token_bytes
    if table is not None and 0 <= token_id < len(table):
        return table[token_id]  # exact, even for half of a multi-byte character
    return tokenizer.decode([token_id]).encode("utf-8")


def token_logprobs(tokenizer, logprobs) -> list[dict[str, Any]]:
    """Chat format: [{"token", "logprob", "bytes", "top_logprobs": [...]}, ...]."""
    def entry(token_id: int, logprob: float) -> dict[str, Any]:
        return {"token": tokenizer.decode([token_id]), "logprob": logprob,
                "bytes": list(_token_bytes(tokenizer, token_id))}

    return [{**entry(lp.token_id, lp.logprob), "top_logprobs": [entry(t, p) for t, p in lp.top]}
            for lp in logprobs or []]


def sse(body: dict[str, Any]) -> str:
    return f"data: {json.dumps(body, ensure_ascii=False)}\n\n"


SSE_DONE = "data: [DONE]\n\n"
