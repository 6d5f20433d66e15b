"""`/v1/completions` logprobs: parallel lists of tokens, logprobs, top alternatives and offsets.

`text_offset` indexes into the choice's `text`: with `echo` the prompt's tokens come first (the
first one has no logprob: null, as OpenAI and vLLM send), and offsets keep counting across
stream chunks. Offsets are counted on the decoded text, so a character split over tokens is
counted at the token that completes it.
"""

from __future__ import annotations

from typing import Any, Optional


class LegacyLogprobs:
    def __init__(self, tokenizer):
        self._tok = tokenizer
        self._detok = tokenizer.detokenizer()
        self._offset = 0

    def block(self, token_ids: list[int], entries: list[Optional[Any]]) -> dict[str, Any]:
        """The logprobs object for these tokens (entries: TokenLogprob or None, one per token)."""
        decode = self._tok.decode
        tokens, logprobs, tops, offsets = [], [], [], []
        for token_id, entry in zip(token_ids, entries):
            offsets.append(self._offset)
            self._offset += len(self._detok.push([token_id]))
            tokens.append(decode([token_id]))
            logprobs.append(None if entry is None else entry.logprob)
            tops.append(None if entry is None else {decode([t]): p for t, p in entry.top})
        return {"tokens": tokens, "token_logprobs": logprobs, "top_logprobs": tops, "text_offset": offsets}


def merge_blocks(blocks: list[dict[str, Any]]) -> Optional[dict[str, Any]]:
    if not blocks:
        return None
    keys = ("tokens", "token_logprobs", "top_logprobs", "text_offset")
    return {key: [v for b in blocks for v in b[key]] for key in keys}
