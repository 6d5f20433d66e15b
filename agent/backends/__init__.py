"""Model backends behind one interface (`ModelBackend`), chosen by a spec string:

- `embedded:PATH` — the in-process engine on a checkpoint folder (loads torch);
- `openai:URL` — any OpenAI-compatible endpoint (`horizon serve`, vLLM, SGLang, a hosted API);
- `replay:FILE` — a JSONL of scripted assistant messages (tests, demos).

A run that makes many backends (a batch, an eval) passes one `EnginePool`, so its `embedded:` jobs
share one loaded engine instead of each loading the model; the run closes the pool at its end.
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
from agent.backends.engine_pool import EnginePool
from agent.config import AgentConfig

KINDS = ("embedded", "openai", "replay")


def make_backend(spec: str, config: AgentConfig | None = None, engines: EnginePool | None = None) -> ModelBackend:
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

    shared = engines.get(target, config.embedded.engine) if engines is not None else None
    return EmbeddedBackend(target, config.embedded, shared)


__all__ = ["BackendError", "BackendInterrupted", "BackendResponse", "ContextOverflow", "EnginePool", "ModelBackend",
           "Usage", "make_backend"]
