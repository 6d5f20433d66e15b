"""One sequence's position in its grammar, and the batched token masks the sampler applies.

Masks are bit-packed (one int32 per 32 token ids, xgrammar's layout) and filled for every
constrained row of a batch in one call that spreads the rows over threads. `MaskPrefetch` fills
them on a worker thread while the model's forward pass runs, so on the critical path there is
only the wait for a mask that is usually done already.
"""

from __future__ import annotations

import logging
import os
import time
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Optional

import torch

from inference.grammar.utf8_guard import Utf8Guard

log = logging.getLogger("horizon.grammar")


class GrammarState:
    """The matcher of one sequence. A token the grammar rejects (only possible when something
    overrides the mask, e.g. a forced token) drops the constraint and is logged."""

    def __init__(self, compiled, request_id: str = "", guard: Optional[Utf8Guard] = None):
        import xgrammar as xgr

        self.matcher = xgr.GrammarMatcher(compiled)
        self.request_id = request_id
        self.failed = False
        self.guard = guard  # keeps the output valid UTF-8 (utf8_guard.py)
        self.utf8: tuple = ()  # the unfinished character at the end of the output (the guard's state)

    @property
    def active(self) -> bool:
        """Whether the next token is constrained (False once complete or dropped)."""
        return not self.failed and not self.matcher.is_terminated()

    def accept(self, token_id: int) -> None:
        if not self.active:
            return
        if self.guard is not None:
            self.utf8 = self.guard.next_state(self.utf8, token_id)
        if not self.matcher.accept_token(token_id):
            self.failed = True
            log.warning("request %s: token %d is outside its grammar; the constraint is dropped",
                        self.request_id, token_id)


class MaskFiller:
    """Fills bitmasks for many GrammarStates at once (xgrammar's BatchGrammarMatcher)."""

    def __init__(self, vocab_size: int, max_threads: int = 4):
        import xgrammar as xgr

        self.vocab_size = vocab_size
        self.words = (vocab_size + 31) // 32
        self._batch = xgr.BatchGrammarMatcher(max(1, min(max_threads, os.cpu_count() or 1)))
        self.fills, self.rows_filled, self.seconds = 0, 0, 0.0  # totals, for stats and benchmarks

    def fill(self, states: list[Optional[GrammarState]]) -> Optional[torch.Tensor]:
        """[len(states), words] int32 bitmask; rows of None / inactive states allow everything.
        None when no state is active (nothing to apply)."""
        rows = [i for i, s in enumerate(states) if s is not None and s.active]
        if not rows:
            return None
        start = time.perf_counter()
        mask = torch.full((len(states), self.words), -1, dtype=torch.int32)
        self._batch.batch_fill_next_token_bitmask([states[i].matcher for i in rows], mask, indices=rows)
        for i in rows:
            guard = states[i].guard
            if guard is not None:
                mask[i] &= guard.mask(states[i].utf8)
        self.fills, self.rows_filled = self.fills + 1, self.rows_filled + len(rows)
        self.seconds += time.perf_counter() - start
        return mask


def apply_mask(logits: torch.Tensor, mask: torch.Tensor) -> None:
    """Set logits of tokens the bitmask disallows to -inf, in place, for every row at once."""
    import xgrammar as xgr

    if logits.device != mask.device:
        mask = mask.to(logits.device, non_blocking=True)
    xgr.apply_token_bitmask_inplace(logits, mask, vocab_size=min(logits.shape[-1], mask.shape[-1] * 32))


class MaskPrefetch:
    """Starts filling a batch's masks on a worker thread; `result()` waits for them."""

    def __init__(self, filler: MaskFiller):
        self.filler = filler
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="horizon-grammar")

    def start(self, states: list[Optional[GrammarState]]) -> Optional[Future]:
        if not any(s is not None and s.active for s in states):
            return None
        return self._pool.submit(self.filler.fill, list(states))

    def close(self) -> None:
        self._pool.shutdown(wait=False)
