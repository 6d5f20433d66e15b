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

from inference.server.segments import Close, Open, Segmenter, Text
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
        self._segments = Segmenter()

    def start_event(self, prompt_tokens: int) -> str:
        message = {**self._envelope(), "content": [], "stop_reason": None, "stop_sequence": None,
                   "usage": {"input_tokens": prompt_tokens, "output_tokens": 0, "cache_read_input_tokens": 0,
                             "cache_creation_input_tokens": 0}}
        return sse_event("message_start", {"type": "message_start", "message": message}) + sse_event("ping", {"type": "ping"})

    def feed(self, event) -> list[str]:
        """Stream events for one parse event (possibly none)."""
        return [line for seg in self._segments.feed(event) for line in self._render(seg)]

    def close(self) -> list[str]:
        return [line for seg in self._segments.close() for line in self._render(seg)]

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

    def _render(self, seg) -> list[str]:
        index = len(self.blocks) - 1
        if isinstance(seg, Open):
            block = {"type": "thinking", "thinking": "", "signature": ""} if seg.kind == "reasoning" else {"type": "text", "text": ""}
            self.blocks.append(block)
            return [self._start(index + 1, dict(block))]
        if isinstance(seg, Text):
            key = "thinking" if seg.kind == "reasoning" else "text"
            self.blocks[-1][key] += seg.text
            return [self._delta(index, {"type": f"{key}_delta", key: seg.text})]
        if isinstance(seg, Close):
            out = []
            if seg.kind == "reasoning":
                block = self.blocks[-1]
                block["signature"] = sign_thinking(block["thinking"])
                out.append(self._delta(index, {"type": "signature_delta", "signature": block["signature"]}))
            return out + [self._stop(index)]
        call = seg.call
        self.blocks.append({"type": "tool_use", "id": call.id, "name": call.name, "input": call.arguments})
        return [self._start(index + 1, {"type": "tool_use", "id": call.id, "name": call.name, "input": {}}),
                self._delta(index + 1, {"type": "input_json_delta",
                                        "partial_json": json.dumps(call.arguments, ensure_ascii=False)}),
                self._stop(index + 1)]

    @staticmethod
    def _start(index: int, block: dict[str, Any]) -> str:
        return sse_event("content_block_start", {"type": "content_block_start", "index": index, "content_block": block})

    @staticmethod
    def _delta(index: int, delta: dict[str, Any]) -> str:
        return sse_event("content_block_delta", {"type": "content_block_delta", "index": index, "delta": delta})

    @staticmethod
    def _stop(index: int) -> str:
        return sse_event("content_block_stop", {"type": "content_block_stop", "index": index})
