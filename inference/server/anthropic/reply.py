"""Parse events -> Anthropic content blocks, as stream events and as the final message body.

A change of kind (thinking, text, tool use) closes the open block and opens the next, so the stream
is message_start, ping, then per block content_block_start / *_delta / content_block_stop, then
message_delta (stop reason, final usage) and message_stop, the sequence the API sends.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import secrets
import uuid
from typing import Any, Optional

from inference.chat.parser import ContentDelta, FormatError, ReasoningDelta, ToolCallEvent
from inference.server.turn import TurnEnd

# Thinking blocks carry a signature, as the API's do; here it is an HMAC under a per-process key,
# which says "this server wrote this reasoning" without claiming Anthropic's encryption.
_SIGNING_KEY = secrets.token_bytes(32)


def sign_thinking(text: str) -> str:
    return base64.b64encode(hmac.new(_SIGNING_KEY, text.encode("utf-8"), hashlib.sha256).digest()).decode()


def sse_event(name: str, data: dict[str, Any]) -> str:
    return f"event: {name}\ndata: {json.dumps(data, ensure_ascii=False)}\n\n"


def usage_body(usage) -> dict[str, int]:
    """Anthropic counts input as uncached + cache reads (+ cache writes, which a local prefix cache
    does not bill): input_tokens excludes the tokens served from the engine's cache."""
    if usage is None:
        return {"input_tokens": 0, "output_tokens": 0, "cache_read_input_tokens": 0, "cache_creation_input_tokens": 0}
    return {"input_tokens": usage.prompt_tokens - usage.cached_tokens, "output_tokens": usage.completion_tokens,
            "cache_read_input_tokens": usage.cached_tokens, "cache_creation_input_tokens": 0}


def stop_reason(end: TurnEnd) -> tuple[str, Optional[str]]:
    """(stop_reason, stop_sequence) for the reply's end."""
    if end.reply.tool_calls and end.finish_reason != "length":
        return "tool_use", None
    if end.finish_reason == "length":
        return "max_tokens", None
    if isinstance(end.stop_reason, str):
        return "stop_sequence", end.stop_reason
    return "end_turn", None


class AnthropicReply:
    def __init__(self, model: str):
        self.id = "msg_" + uuid.uuid4().hex[:24]
        self.model = model
        self.blocks: list[dict[str, Any]] = []
        self._open: Optional[str] = None  # kind of the open block: "thinking" | "text"
        self._blank = ""  # whitespace not yet shown: a block of only whitespace is left out
        self._blank_kind: Optional[str] = None

    def start_event(self, prompt_tokens: int) -> str:
        message = {**self._envelope(), "content": [], "stop_reason": None, "stop_sequence": None,
                   "usage": {"input_tokens": prompt_tokens, "output_tokens": 0, "cache_read_input_tokens": 0,
                             "cache_creation_input_tokens": 0}}
        return sse_event("message_start", {"type": "message_start", "message": message}) + sse_event("ping", {"type": "ping"})

    def feed(self, event) -> list[str]:
        """Stream events for one parse event (possibly none)."""
        if isinstance(event, ReasoningDelta):
            return self._text("thinking", event.text)
        if isinstance(event, ContentDelta):
            return self._text("text", event.text)
        if isinstance(event, FormatError):  # the malformed text goes back as text, as in chat completions
            return self._text("text", event.raw) if event.raw else []
        if isinstance(event, ToolCallEvent):
            call = event.call
            out = self.close()
            index = len(self.blocks)
            self.blocks.append({"type": "tool_use", "id": call.id, "name": call.name, "input": call.arguments})
            out.append(sse_event("content_block_start", {"type": "content_block_start", "index": index,
                                 "content_block": {"type": "tool_use", "id": call.id, "name": call.name, "input": {}}}))
            out.append(self._delta(index, {"type": "input_json_delta",
                                           "partial_json": json.dumps(call.arguments, ensure_ascii=False)}))
            out.append(sse_event("content_block_stop", {"type": "content_block_stop", "index": index}))
            return out
        return []

    def close(self) -> list[str]:
        """Close the open block (a thinking block gets its signature first)."""
        self._blank = ""
        if self._open is None:
            return []
        index, block = len(self.blocks) - 1, self.blocks[-1]
        out = []
        if self._open == "thinking":
            block["signature"] = sign_thinking(block["thinking"])
            out.append(self._delta(index, {"type": "signature_delta", "signature": block["signature"]}))
        out.append(sse_event("content_block_stop", {"type": "content_block_stop", "index": index}))
        self._open = None
        return out

    def end_events(self, end: TurnEnd) -> list[str]:
        reason, sequence = stop_reason(end)
        return self.close() + [
            sse_event("message_delta", {"type": "message_delta",
                                        "delta": {"stop_reason": reason, "stop_sequence": sequence},
                                        "usage": usage_body(end.usage)}),
            sse_event("message_stop", {"type": "message_stop"}),
        ]

    def message(self, end: TurnEnd) -> dict[str, Any]:
        self.close()
        reason, sequence = stop_reason(end)
        return {**self._envelope(), "content": self.blocks, "stop_reason": reason, "stop_sequence": sequence,
                "usage": usage_body(end.usage)}

    # -- helpers -------------------------------------------------------------------------------

    def _envelope(self) -> dict[str, Any]:
        return {"id": self.id, "type": "message", "role": "assistant", "model": self.model}

    def _text(self, kind: str, text: str) -> list[str]:
        out: list[str] = []
        if self._open != kind:
            if self._open is not None:
                out += self.close()
            if self._blank_kind != kind:
                self._blank = ""
            if not (self._blank + text).strip():
                self._blank, self._blank_kind = self._blank + text, kind
                return out
            text, self._blank = self._blank + text, ""
            index = len(self.blocks)
            block = {"type": "thinking", "thinking": "", "signature": ""} if kind == "thinking" else {"type": "text", "text": ""}
            self.blocks.append(block)
            self._open = kind
            out.append(sse_event("content_block_start", {"type": "content_block_start", "index": index,
                                                         "content_block": dict(block)}))
        key = "thinking" if kind == "thinking" else "text"
        self.blocks[-1][key] += text
        out.append(self._delta(len(self.blocks) - 1, {"type": f"{key}_delta", key: text}))
        return out

    @staticmethod
    def _delta(index: int, delta: dict[str, Any]) -> str:
        return sse_event("content_block_delta", {"type": "content_block_delta", "index": index, "delta": delta})
