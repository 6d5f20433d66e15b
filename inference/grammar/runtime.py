"""The engine's grammar support, created on the first constrained request (so requests without
a grammar never load xgrammar or build its vocabulary tables)."""

from __future__ import annotations

import threading
from concurrent.futures import Future
from pathlib import Path
from typing import Optional

import torch

from inference.grammar.compiler import GrammarCompiler, GrammarError
from inference.grammar.matcher import GrammarState, MaskFiller, MaskPrefetch
from inference.grammar.utf8_guard import Utf8Guard
from inference.grammar.spec import GrammarSpec


class GrammarRuntime:
    def __init__(self, compiler: GrammarCompiler, token_bytes: list[bytes], max_threads: int = 4):
        self.compiler = compiler
        self.utf8 = Utf8Guard(token_bytes, compiler.vocab_size)
        self.filler = MaskFiller(compiler.vocab_size, max_threads)
        self.prefetcher = MaskPrefetch(self.filler)

    @classmethod
    def for_checkpoint(cls, path: str | Path, vocab_size: int, eos_ids: list[int]) -> GrammarRuntime:
        from inference.tokenizer import Tokenizer

        tok = Tokenizer.from_pretrained(path)  # FileNotFoundError when the checkpoint ships none
        stops = sorted(set(tok.stop_token_ids) | {i for i in eos_ids if i < vocab_size})
        table = tok.token_bytes or [tok.decode([i]).encode("utf-8") for i in range(tok.vocab_size)]
        return cls(GrammarCompiler(table, vocab_size, stops), table)

    def new_state(self, compiled, request_id: str) -> GrammarState:
        return GrammarState(compiled, request_id, self.utf8)

    def prefetch(self, states: list[Optional[GrammarState]]) -> Optional[Future]:
        return self.prefetcher.start(states)

    def fill(self, states: list[Optional[GrammarState]]) -> Optional[torch.Tensor]:
        return self.filler.fill(states)

    def close(self) -> None:
        self.prefetcher.close()


class LazyGrammarRuntime:
    """Builds the GrammarRuntime once, thread-safely, on first use."""

    def __init__(self, path: str | Path, vocab_size: int, eos_ids: list[int]):
        self._args = (path, vocab_size, list(eos_ids))
        self._runtime: Optional[GrammarRuntime] = None
        self._lock = threading.Lock()

    @property
    def loaded(self) -> Optional[GrammarRuntime]:
        return self._runtime

    def get(self) -> GrammarRuntime:
        with self._lock:
            if self._runtime is None:
                self._runtime = GrammarRuntime.for_checkpoint(*self._args)
            return self._runtime


__all__ = ["GrammarError", "GrammarRuntime", "LazyGrammarRuntime"]
