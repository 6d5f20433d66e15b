"""One in-process engine per (checkpoint, engine settings), shared by every backend made through a pool.

A batch or an eval run makes a fresh `embedded:` backend per job or trial. Each one loading its own
model (weights plus a full KV cache) would reload the checkpoint for every job and, with `-j N`,
hold N copies at once. Through a pool the jobs share one `Engine`: it runs its own step loop, so
parallel jobs' requests are continuously batched together. Each backend still keeps its own
conversation and session id. The pool's owner (the run) closes it at the end, which stops every
engine's loop thread and drops the model.
"""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agent.backends.base import BackendError


@dataclass
class LoadedEngine:
    """An engine with the tokenizer it detokenizes with."""

    engine: Any  # inference.engine.engine.Engine (imported lazily: torch)
    tokenizer: Any  # inference.tokenizer.Tokenizer


def load_engine(path: str | Path, engine_settings: dict[str, Any]) -> LoadedEngine:
    """Load a checkpoint folder into an engine with `horizon serve`'s defaults plus `engine_settings`."""
    from inference.engine.engine import Engine
    from inference.engine_defaults import EngineSettingsError, default_engine_config
    from inference.tokenizer import Tokenizer

    path = Path(path)
    if not (path / "config.json").is_file():
        raise BackendError(f"embedded:{path}: not a checkpoint folder (no config.json)")
    tokenizer = Tokenizer.from_pretrained(path)
    try:  # the same defaults as `horizon serve` (a KV budget sized to the model's context)
        engine_config = default_engine_config(path, **engine_settings)
    except EngineSettingsError as exc:
        raise BackendError(f"embedded.engine: {exc}") from None
    try:
        engine = Engine(path, engine_config, detokenize=tokenizer.decode)
    except (ValueError, OSError, RuntimeError) as exc:  # e.g. a budget below one page, an unusable device
        raise BackendError(f"embedded:{path}: cannot start the engine: {' '.join(str(exc).split())}") from None
    return LoadedEngine(engine, tokenizer)


@dataclass
class EnginePool:
    """Engines keyed by (resolved checkpoint path, engine settings); `loads` counts model loads."""

    loads: int = 0
    _engines: dict[tuple[str, str], LoadedEngine] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _closed: bool = False

    def get(self, path: str | Path, engine_settings: dict[str, Any]) -> LoadedEngine:
        key = (str(Path(path).resolve()), json.dumps(engine_settings, sort_keys=True, default=str))
        # Loading under the lock: two jobs starting together must load once, not twice.
        with self._lock:
            if self._closed:
                raise BackendError("the engine pool is closed (the run that owned it has ended)")
            loaded = self._engines.get(key)
            if loaded is None:
                loaded = load_engine(path, engine_settings)
                loaded.engine.start()  # one step loop batches every job's requests
                self._engines[key] = loaded
                self.loads += 1
            return loaded

    def engines(self) -> list[Any]:
        with self._lock:
            return [loaded.engine for loaded in self._engines.values()]

    def stats(self) -> dict[str, int]:
        with self._lock:
            return {"loads": self.loads, "engines": len(self._engines)}

    def close(self) -> None:
        """Stop every engine (requests still running end as aborted) and refuse new ones."""
        with self._lock:
            self._closed = True
            loaded, self._engines = list(self._engines.values()), {}
        for item in loaded:
            item.engine.shutdown()

    def __enter__(self) -> "EnginePool":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
