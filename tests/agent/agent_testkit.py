"""Helpers shared by the agent tests (replay scripts)."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

_ids = itertools.count(1)


def call(name: str, call_id: str | None = None, **arguments) -> dict:
    """One tool call in the replay file's OpenAI shape."""
    return {"id": call_id or f"call_{next(_ids)}",
            "type": "function", "function": {"name": name, "arguments": json.dumps(arguments)}}


def write_replay(path: Path, steps: list[dict]) -> Path:
    path.write_text("".join(json.dumps(step) + "\n" for step in steps), encoding="utf-8")
    return path
