"""Token ids of `<think>` / `</think>`, read from a checkpoint's tokenizer.json if it has one."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

THINK_START = "<think>"
THINK_END = "</think>"


def think_token_ids(checkpoint: Path) -> tuple[Optional[int], Optional[int]]:
    path = Path(checkpoint) / "tokenizer.json"
    if not path.exists():
        return None, None
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(path))
    return tok.token_to_id(THINK_START), tok.token_to_id(THINK_END)
