"""Per-session conversations kept as token ids, so a session's next prompt extends the last one
token for token even when re-rendering would differ (non-canonical JSON, whitespace, reasoning).

A request continues its session's Conversation only if its messages start with exactly the
messages the session has seen (including the reply the server returned); otherwise it is rendered
from scratch and replaces the session. One request per session at a time uses the stored state.
"""

from __future__ import annotations

import threading
from collections import OrderedDict

from inference.chat.conversation import Conversation
from inference.chat.messages import Message


def message_key(m: Message) -> tuple:
    calls = tuple((tc.name, repr(sorted(tc.arguments.items()))) for tc in m.tool_calls or [])
    images = tuple((p.at, p.url) for p in m.images or [])  # a different screenshot is a different message
    return (m.role, (m.content or "").strip(), (m.reasoning_content or "").strip(), calls, m.tool_call_id or "", images)


class SessionStore:
    def __init__(self, max_sessions: int = 1024):
        self.max_sessions = max_sessions
        self._items: OrderedDict[str, tuple[tuple, Conversation]] = OrderedDict()
        self._lock = threading.Lock()

    def take(self, session_id: str, fingerprint: tuple, messages: list[Message]) -> Conversation | None:
        """The session's conversation with the new messages added, if `messages` extends it."""
        with self._lock:
            entry = self._items.pop(session_id, None)
        if entry is None or entry[0] != fingerprint:
            return None
        conv = entry[1]
        seen = len(conv.messages)
        if len(messages) <= seen or [message_key(m) for m in messages[:seen]] != [message_key(m) for m in conv.messages]:
            return None
        conv.add(*messages[seen:])
        return conv

    def put(self, session_id: str, fingerprint: tuple, conv: Conversation) -> None:
        with self._lock:
            self._items[session_id] = (fingerprint, conv)
            self._items.move_to_end(session_id)
            while len(self._items) > self.max_sessions:
                self._items.popitem(last=False)

    def __len__(self) -> int:
        return len(self._items)
