"""Generated ids -> text for the API: incremental, UTF-8 safe, without the stop token or stop string.

OpenAI responses leave out what stopped generation. Stop strings are found by the engine after the
token that completes them, so text that could be the start of a stop string is held back until it
is known not to be one.
"""

from __future__ import annotations

from typing import Optional

from inference.tokenizer import Tokenizer


class OutputText:
    def __init__(self, tokenizer: Tokenizer, stop_strings: list[str]):
        self._detok = tokenizer.detokenizer()
        self._stops = [s for s in stop_strings if s]
        self._held = ""

    def push(self, token_ids: list[int], final_stop: Optional[str | int] = None) -> str:
        """Text that is safe to show; `final_stop` is the delta's stop reason when it is the last one."""
        if isinstance(final_stop, int) and token_ids and token_ids[-1] == final_stop:
            token_ids = token_ids[:-1]
        text = self._held + self._detok.push(token_ids)
        if final_stop is not None or not self._stops:
            self._held = ""
            text += self._detok.flush() if final_stop is not None else ""
            if isinstance(final_stop, str) and final_stop in text:
                text = text[: text.index(final_stop)]
            return text
        cut = _safe_prefix(text, self._stops)
        self._held = text[cut:]
        return text[:cut]

    def finish(self) -> str:
        """Flush at the end of a stream that did not end on a stop string."""
        text, self._held = self._held + self._detok.flush(), ""
        return text


def _safe_prefix(text: str, stops: list[str]) -> int:
    """Length of the prefix of text that can be neither part of a stop string nor precede one."""
    cut = min((i for i in (text.find(s) for s in stops) if i >= 0), default=len(text))
    longest = max(len(s) for s in stops)
    for k in range(min(cut, longest), 0, -1):
        if any(s.startswith(text[cut - k : cut]) for s in stops):
            return cut - k
    return cut
