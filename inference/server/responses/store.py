"""Stored responses (`store: true`) for `GET /v1/responses/{id}` and `previous_response_id`.

Each record keeps the reply body, the conversation's messages (without the instructions, which
every request restates) and the token-exact Conversation after the reply. A follow-up forks that
Conversation, so its prompt extends the stored prompt + reply id for id and the engine's prefix
cache serves all of it; the chain shares one engine session id, which keeps its pages retained.
Memory is bounded by the number of records and by the token ids they hold, oldest out first.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any, Optional

from inference.chat.conversation import Conversation
from inference.chat.messages import Message
from inference.server.sessions import message_key


@dataclass
class ResponseRecord:
    id: str
    body: dict[str, Any]
    history: list[Message]  # input messages + the reply, without the instructions
    chain: str  # the engine session id shared by a previous_response_id chain
    fingerprint: tuple = ()
    conversation: Optional[Conversation] = None

    @property
    def size(self) -> int:
        return len(self.conversation.ids) if self.conversation is not None else 0


class ForkView:
    """SessionStore's `take` over one record: its conversation, forked, with the new messages."""

    def __init__(self, record: ResponseRecord):
        self.record = record

    def take(self, _session_id: str, fingerprint: tuple, messages: list[Message]) -> Optional[Conversation]:
        rec = self.record
        if rec.conversation is None or rec.fingerprint != fingerprint:
            return None
        seen = len(rec.conversation.messages)
        if len(messages) <= seen or [message_key(m) for m in messages[:seen]] != [
                message_key(m) for m in rec.conversation.messages]:
            return None
        conv = rec.conversation.fork()
        conv.add(*messages[seen:])
        return conv


class ResponseStore:
    def __init__(self, max_responses: int = 1024, max_tokens: int = 4_000_000):
        self.max_responses, self.max_tokens = max_responses, max_tokens
        self._items: OrderedDict[str, ResponseRecord] = OrderedDict()
        self._tokens = 0
        self._lock = threading.Lock()

    def get(self, response_id: str) -> Optional[ResponseRecord]:
        with self._lock:
            record = self._items.get(response_id)
            if record is not None:
                self._items.move_to_end(response_id)
            return record

    def put(self, record: ResponseRecord) -> None:
        with self._lock:
            old = self._items.pop(record.id, None)
            self._tokens -= old.size if old else 0
            self._items[record.id] = record
            self._tokens += record.size
            while len(self._items) > self.max_responses or (self._tokens > self.max_tokens and len(self._items) > 1):
                _, evicted = self._items.popitem(last=False)
                self._tokens -= evicted.size

    def delete(self, response_id: str) -> bool:
        with self._lock:
            record = self._items.pop(response_id, None)
            self._tokens -= record.size if record else 0
            return record is not None

    def __len__(self) -> int:
        return len(self._items)
