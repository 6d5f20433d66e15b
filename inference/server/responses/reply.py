"""Parse events -> Responses output items (reasoning, message, function_call), as the final response
body and as the stream events the SDK's accumulator checks: response.created / in_progress, per
item output_item.added, its deltas and .done events, output_item.done, then response.completed
(or response.incomplete when max_output_tokens cut it), every event with its sequence_number.
"""

from __future__ import annotations

import json
import time
import uuid
from typing import Any, Optional

from inference.server.segments import Call, Close, Open, Segmenter, Text
from inference.server.turn import TurnEnd


def new_id(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex[:24]}"


def usage_body(usage, reasoning_tokens: int) -> Optional[dict[str, Any]]:
    if usage is None:
        return None
    return {"input_tokens": usage.prompt_tokens,
            "input_tokens_details": {"cached_tokens": usage.cached_tokens, "cache_write_tokens": 0},
            "output_tokens": usage.completion_tokens,
            "output_tokens_details": {"reasoning_tokens": reasoning_tokens},
            "total_tokens": usage.prompt_tokens + usage.completion_tokens}


class ResponsesReply:
    def __init__(self, envelope: dict[str, Any], encode, namespaces: Optional[dict[str, str]] = None):
        """`envelope`: the request's echoed fields (model, instructions, tools, ...); `encode`
        (text -> ids) counts the reasoning tokens for usage; `namespaces`: function name -> the
        namespace tool it came from, for the function_call items."""
        self._namespaces = namespaces or {}
        self.id = new_id("resp")
        self.created_at = int(time.time())
        self.envelope = envelope
        self.items: list[dict[str, Any]] = []
        self._encode = encode
        self._segments = Segmenter()
        self._seq = 0

    # -- whole bodies --------------------------------------------------------------------------

    def response(self, status: str = "in_progress", end: Optional[TurnEnd] = None) -> dict[str, Any]:
        incomplete = {"reason": "max_output_tokens"} if status == "incomplete" else None
        reasoning = "".join(i["content"][0]["text"] for i in self.items if i["type"] == "reasoning")
        return {"id": self.id, "object": "response", "created_at": self.created_at, "status": status,
                "error": None, "incomplete_details": incomplete, **self.envelope,
                "output": [dict(i) for i in self.items] if status != "in_progress" else [],
                "usage": usage_body(end.usage, len(self._encode(reasoning)) if reasoning else 0) if end else None}

    def finish(self, end: TurnEnd) -> dict[str, Any]:
        """Close the items and return the final body (non-streaming)."""
        self.close(incomplete=end.finish_reason == "length")
        return self.response(self.status(end), end)

    @staticmethod
    def status(end: TurnEnd) -> str:
        return "incomplete" if end.finish_reason == "length" else "completed"

    # -- stream events -------------------------------------------------------------------------

    def event(self, kind: str, **fields) -> str:
        data = {"type": kind, "sequence_number": self._seq, **fields}
        self._seq += 1
        return f"event: {kind}\ndata: {json.dumps(data, ensure_ascii=False)}\n\n"

    def start_events(self) -> list[str]:
        return [self.event("response.created", response=self.response()),
                self.event("response.in_progress", response=self.response())]

    def feed(self, parse_event) -> list[str]:
        return [line for seg in self._segments.feed(parse_event) for line in self._render(seg)]

    def close(self, incomplete: bool = False) -> list[str]:
        return [line for seg in self._segments.close() for line in self._render(seg, incomplete)]

    def end_events(self, end: TurnEnd) -> list[str]:
        out = self.close(incomplete=end.finish_reason == "length")
        status = self.status(end)
        return out + [self.event(f"response.{status}", response=self.response(status, end))]

    def error_event(self, message: str, code: Optional[str], param: Optional[str]) -> str:
        return self.event("error", code=code, message=message, param=param)

    # -- segments -> items ---------------------------------------------------------------------

    def _render(self, seg, incomplete: bool = False) -> list[str]:
        index = len(self.items) - 1
        if isinstance(seg, Open):
            index += 1
            if seg.kind == "reasoning":
                item = {"id": new_id("rs"), "type": "reasoning", "summary": [],
                        "content": [{"type": "reasoning_text", "text": ""}], "status": "in_progress"}
                self.items.append(item)
                return [self.event("response.output_item.added", output_index=index,
                                   item={**item, "content": []})]
            item = {"id": new_id("msg"), "type": "message", "role": "assistant", "status": "in_progress",
                    "content": [{"type": "output_text", "text": "", "annotations": [], "logprobs": []}]}
            self.items.append(item)
            return [self.event("response.output_item.added", output_index=index, item={**item, "content": []}),
                    self.event("response.content_part.added", item_id=item["id"], output_index=index,
                               content_index=0, part=dict(item["content"][0]))]
        if isinstance(seg, Text):
            item = self.items[-1]
            item["content"][0]["text"] += seg.text
            kind = "response.reasoning_text.delta" if seg.kind == "reasoning" else "response.output_text.delta"
            extra = {} if seg.kind == "reasoning" else {"logprobs": []}
            return [self.event(kind, item_id=item["id"], output_index=index, content_index=0, delta=seg.text, **extra)]
        if isinstance(seg, Close):
            item = self.items[-1]
            item["status"] = "incomplete" if incomplete else "completed"
            part = item["content"][0]
            if seg.kind == "reasoning":
                return [self.event("response.reasoning_text.done", item_id=item["id"], output_index=index,
                                   content_index=0, text=part["text"]),
                        self.event("response.output_item.done", output_index=index, item=item)]
            return [self.event("response.output_text.done", item_id=item["id"], output_index=index, content_index=0,
                               text=part["text"], logprobs=[]),
                    self.event("response.content_part.done", item_id=item["id"], output_index=index,
                               content_index=0, part=part),
                    self.event("response.output_item.done", output_index=index, item=item)]
        assert isinstance(seg, Call)
        index += 1
        arguments = json.dumps(seg.call.arguments, ensure_ascii=False)
        item = {"id": new_id("fc"), "type": "function_call", "call_id": seg.call.id, "name": seg.call.name,
                "arguments": "", "status": "in_progress"}
        if seg.call.name in self._namespaces:
            item["namespace"] = self._namespaces[seg.call.name]
        self.items.append(item)
        added = self.event("response.output_item.added", output_index=index, item=dict(item))
        item.update(arguments=arguments, status="completed")
        return [added,
                self.event("response.function_call_arguments.delta", item_id=item["id"], output_index=index,
                           delta=arguments),
                self.event("response.function_call_arguments.done", item_id=item["id"], output_index=index,
                           name=item["name"], arguments=arguments),
                self.event("response.output_item.done", output_index=index, item=item)]
