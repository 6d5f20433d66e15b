"""Keeps constrained output valid UTF-8, which xgrammar 0.2.9 alone does not: inside strings it
lets byte-level tokens write overlong forms (E0 80..9F) and UTF-16 surrogates (ED A0..BF), which
decode to U+FFFD and break `maxLength` or patterns.

What may follow depends only on the unfinished character at the end of the output: the range its
next byte must be in and how many bytes it still needs, so there are eight states. For each, a
bitmask of the tokens that keep the output a valid UTF-8 prefix is built the first time it is
needed (one pass over the vocabulary) and ANDed into the grammar's mask.
"""

from __future__ import annotations

import threading
from typing import Optional

import torch

Utf8State = tuple  # () on a character boundary, else (lo, hi, remaining) for the next byte
_CONT = (0x80, 0xBF)


def _lead(b: int) -> Optional[Utf8State]:
    """The state after lead byte b; () for ASCII; None for a byte that cannot start a character."""
    if b < 0x80:
        return ()
    if 0xC2 <= b <= 0xDF:
        return (*_CONT, 1)
    if 0xE0 <= b <= 0xEF:
        return ({0xE0: (0xA0, 0xBF), 0xED: (0x80, 0x9F)}.get(b, _CONT)) + (2,)
    if 0xF0 <= b <= 0xF4:
        return ({0xF0: (0x90, 0xBF), 0xF4: (0x80, 0x8F)}.get(b, _CONT)) + (3,)
    return None


def advance(state: Utf8State, data: bytes) -> Optional[Utf8State]:
    """The state after `data`, or None if it makes the output invalid UTF-8."""
    for b in data:
        if state:
            lo, hi, remaining = state
            if not lo <= b <= hi:
                return None
            state = (*_CONT, remaining - 1) if remaining > 1 else ()
        else:
            state = _lead(b)
            if state is None:
                return None
    return state


class Utf8Guard:
    def __init__(self, token_bytes: list[bytes], vocab_size: int):
        self.tokens = list(token_bytes[:vocab_size]) + [b""] * max(0, vocab_size - len(token_bytes))
        self.words = (vocab_size + 31) // 32
        self._masks: dict[Utf8State, torch.Tensor] = {}
        self._lock = threading.Lock()

    def mask(self, state: Utf8State) -> torch.Tensor:
        """[words] int32: the tokens that may follow in this state."""
        with self._lock:
            if state not in self._masks:
                ok = torch.zeros(self.words * 32, dtype=torch.int64)
                ok[: len(self.tokens)] = torch.tensor([advance(state, t) is not None for t in self.tokens])
                bits = (ok.view(self.words, 32) << torch.arange(32)).sum(dim=1)
                self._masks[state] = torch.where(bits >= 2**31, bits - 2**32, bits).to(torch.int32)
            return self._masks[state]

    def next_state(self, state: Utf8State, token_id: int) -> Utf8State:
        data = self.tokens[token_id] if 0 <= token_id < len(self.tokens) else b""
        return advance(state, data) or ()
