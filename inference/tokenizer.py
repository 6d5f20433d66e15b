"""Tokenizer for GLM-5.x checkpoints: tokenizer.json via the `tokenizers` library (glm5-model.md §F).

No BOS is added: prompts start with `[gMASK]<sop>`, which the chat template writes. No torch here.
"""

from __future__ import annotations

import codecs
import json
from functools import cached_property
from pathlib import Path

from inference.chat.special_tokens import SPECIAL_TOKENS, STOP_TOKENS


class Tokenizer:
    def __init__(self, backend, config: dict | None = None, chat_template: str | None = None):
        from tokenizers import Tokenizer as _Backend

        if not isinstance(backend, _Backend):
            raise TypeError(f"backend: expected tokenizers.Tokenizer, got {type(backend).__name__}")
        self.backend = backend
        self.config = config or {}
        self.chat_template = chat_template

    @classmethod
    def from_pretrained(cls, path: str | Path) -> Tokenizer:
        """Load tokenizer.json (+ tokenizer_config.json, chat_template.jinja when present) from a folder."""
        from tokenizers import Tokenizer as _Backend

        folder = Path(path)
        tok_file = folder / "tokenizer.json"
        if not tok_file.is_file():
            raise FileNotFoundError(f"path: no tokenizer.json in {folder}")
        config_file = folder / "tokenizer_config.json"
        config = json.loads(config_file.read_text(encoding="utf-8")) if config_file.is_file() else {}
        template_file = folder / "chat_template.jinja"
        template = template_file.read_text(encoding="utf-8") if template_file.is_file() else config.get("chat_template")
        return cls(_Backend.from_file(str(tok_file)), config, template)

    # -- vocabulary ---------------------------------------------------------------------------

    @cached_property
    def special_tokens(self) -> dict[str, int]:
        """Every added special token by its text, e.g. {"<|user|>": 154827, ...}."""
        return {
            tok.content: idx for idx, tok in self.backend.get_added_tokens_decoder().items() if tok.special
        }

    @property
    def vocab_size(self) -> int:
        return self.backend.get_vocab_size(with_added_tokens=True)

    @cached_property
    def stop_token_ids(self) -> list[int]:
        """Ids that end an assistant reply: <|endoftext|>, <|user|>, <|observation|> (those present)."""
        return [self.special_tokens[t] for t in STOP_TOKENS if t in self.special_tokens]

    def token_id(self, token: str) -> int:
        idx = self.backend.token_to_id(token)
        if idx is None:
            raise KeyError(f"token: {token!r} is not in the vocabulary")
        return idx

    def missing_glm_tokens(self) -> list[str]:
        return [t for t in SPECIAL_TOKENS if t not in self.special_tokens]

    # -- text <-> ids -------------------------------------------------------------------------

    def encode(self, text: str) -> list[int]:
        """Ids for text; special-token strings in the text (e.g. "<|user|>") become their ids."""
        return self.backend.encode(text, add_special_tokens=False).ids

    def decode(self, ids: list[int], skip_special_tokens: bool = False) -> str:
        return self.backend.decode(list(ids), skip_special_tokens=skip_special_tokens)

    @cached_property
    def token_bytes(self) -> list[bytes] | None:
        """Raw bytes of every id for byte-level BPE vocabularies (None for other tokenizers)."""
        if type(self.backend.decoder).__name__ != "ByteLevel":
            return None
        byte_of = {ch: b for b, ch in _bytes_to_unicode().items()}
        table = [b""] * self.vocab_size
        for token, idx in self.backend.get_vocab(with_added_tokens=False).items():
            if idx < len(table):
                table[idx] = bytes(byte_of[ch] for ch in token if ch in byte_of)
        for idx, tok in self.backend.get_added_tokens_decoder().items():
            if idx < len(table):
                table[idx] = tok.content.encode("utf-8")
        return table

    def detokenizer(self, skip_special_tokens: bool = False) -> IncrementalDetokenizer:
        return IncrementalDetokenizer(self, skip_special_tokens)


class IncrementalDetokenizer:
    """Turns a stream of ids into text pieces; never emits half of a multi-byte UTF-8 character.

    Byte-level vocabularies go through an incremental UTF-8 decoder (exact, O(1) per token); other
    vocabularies re-decode a short window and hold back text that ends in U+FFFD.
    """

    def __init__(self, tokenizer: Tokenizer, skip_special_tokens: bool = False):
        self.tokenizer = tokenizer
        self.skip = set(tokenizer.special_tokens.values()) if skip_special_tokens else set()
        self._table = tokenizer.token_bytes
        self._utf8 = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._ids: list[int] = []
        self._prefix = 0  # window start for the generic path
        self._read = 0  # ids already turned into emitted text

    def push(self, ids: list[int] | int) -> str:
        ids = [ids] if isinstance(ids, int) else ids
        ids = [i for i in ids if i not in self.skip]
        if self._table is not None:
            table = self._table
            data = b"".join(table[i] if 0 <= i < len(table) else b"" for i in ids)
            return self._utf8.decode(data)
        self._ids.extend(ids)
        decode = self.tokenizer.decode
        before = decode(self._ids[self._prefix : self._read])
        after = decode(self._ids[self._prefix :])
        if len(after) > len(before) and not after.endswith("\ufffd"):
            self._prefix, self._read = self._read, len(self._ids)
            return after[len(before) :]
        return ""

    def flush(self) -> str:
        """Whatever is held back at the end of the stream (incomplete bytes become U+FFFD)."""
        if self._table is not None:
            return self._utf8.decode(b"", final=True)
        rest = self.tokenizer.decode(self._ids[self._prefix :])
        done = self.tokenizer.decode(self._ids[self._prefix : self._read])
        self._prefix = self._read = len(self._ids)
        return rest[len(done) :]


def _bytes_to_unicode() -> dict[int, str]:
    """GPT-2's byte -> printable character map that byte-level BPE vocabularies are written in."""
    printable = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    mapping = {b: chr(b) for b in printable}
    n = 0
    for b in range(256):
        if b not in mapping:
            mapping[b] = chr(256 + n)
            n += 1
    return mapping
