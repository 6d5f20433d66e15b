"""OpenAI chat messages as clients really send them -> our Message fields.

What `messages.append(resp.choices[0].message.model_dump())` produces must come back in: OpenAI's
own assistant fields (`refusal`, `function_call`, `audio`, `annotations`), this server's own
`format_errors`, vLLM's `reasoning` (for `reasoning_content`) and the `developer` role (a system
message). Keys a message does not use are dropped, as vLLM does; a legacy `function_call` that
is set becomes a tool call.
"""

from __future__ import annotations

from typing import Any

# Message's own fields (messages.py validates each wire dict through normalize_message first).
_KEPT = {"role", "content", "reasoning_content", "tool_calls", "tool_call_id", "name", "images"}


def normalize_message(raw: Any) -> Any:
    """One wire message -> a dict Message accepts (anything not a dict is left for pydantic to refuse)."""
    if not isinstance(raw, dict):
        return raw
    msg = {k: v for k, v in raw.items() if k in _KEPT}
    if msg.get("role") == "developer":
        msg["role"] = "system"
    if msg.get("reasoning_content") is None and isinstance(raw.get("reasoning"), str):
        msg["reasoning_content"] = raw["reasoning"]
    legacy = raw.get("function_call")
    if isinstance(legacy, dict) and not msg.get("tool_calls"):
        msg["tool_calls"] = [{"id": "", "type": "function", "function": legacy}]
    return msg
