"""Model backends behind one interface (`ModelBackend`), chosen by a spec string:

- `embedded:PATH` — the in-process engine on a checkpoint folder (loads torch);
- `openai:URL` — any OpenAI-compatible endpoint (`horizon serve`, vLLM, SGLang, a hosted API);
- `replay:FILE` — a JSONL of scripted assistant messages (tests, demos).
"""

from __future__ import annotations

from agent.backends.base import (
    BackendError,
    BackendInterrupted,
    BackendResponse,
    ContextOverflow,
    ModelBackend,
    Usage,
)
from agent.config import AgentConfig

KINDS = ("embedded", "openai", "replay")


def make_backend(spec: str, config: AgentConfig | None = None) -> ModelBackend:
    config = config or AgentConfig()
    kind, sep, target = spec.partition(":")
    if not sep or kind not in KINDS or not target:
        raise BackendError(f"model spec {spec!r}: expected one of embedded:PATH, openai:URL, replay:FILE")
    if kind == "replay":
        from agent.backends.replay import ReplayBackend

        return ReplayBackend(target)
    if kind == "openai":
        from agent.backends.openai_compat import OpenAIBackend

        return OpenAIBackend(target, config.openai)
    from agent.backends.embedded import EmbeddedBackend  # imports torch: only when asked for

    return EmbeddedBackend(target, config.embedded)


__all__ = ["BackendError", "BackendInterrupted", "BackendResponse", "ContextOverflow", "ModelBackend", "Usage",
           "make_backend"]
