"""Tab completion for the prompt: `/command` names and `@path` file mentions."""

from __future__ import annotations

import os
import re
from pathlib import Path

from agent.images import IMAGE_SUFFIXES
from agent.tui.commands import complete_command

MENTION = re.compile(r"(?:^|\s)@([^\s]*)$")
MAX_ATTACH_BYTES = 100_000


def complete(text: str, root: Path) -> tuple[str, list[str]]:
    """Return (new text, candidates). The text grows by the candidates' common prefix."""
    if text.startswith("/") and " " not in text:
        names = complete_command(text[1:])
        if len(names) == 1:
            return f"/{names[0]} ", names
        return "/" + os.path.commonprefix(names) if names else text, names
    match = MENTION.search(text)
    if match:
        typed = match.group(1)
        names = _paths(root, typed)
        if not names:
            return text, []
        common = names[0] if len(names) == 1 else os.path.commonprefix(names)
        if len(common) > len(typed):
            return text[: len(text) - len(typed)] + common, names
        return text, names
    return text, []


def _paths(root: Path, typed: str) -> list[str]:
    folder, _, stem = typed.rpartition("/")
    base = (root / folder) if folder else root
    try:
        entries = sorted(base.iterdir())
    except OSError:
        return []
    out = []
    for entry in entries:
        if entry.name.startswith(".") and not stem.startswith("."):
            continue
        if entry.name.startswith(stem):
            rel = f"{folder}/{entry.name}" if folder else entry.name
            out.append(rel + "/" if entry.is_dir() else rel)
    return out


def mentioned_files(text: str, root: Path) -> list[Path]:
    """Files named by `@path` in a message, relative to the workspace; unknown names are ignored."""
    found = []
    for name in re.findall(r"(?:^|\s)@([^\s]+)", text):
        path = (root / name).resolve()
        if path.is_file() and root.resolve() in path.parents and path not in found:
            found.append(path)
    return found


def read_in_repo(root: Path, name: str) -> bytes:
    """A mentioned file's bytes, refusing paths that leave the checkout."""
    path = (root / name).resolve()
    if root.resolve() not in path.parents:
        raise FileNotFoundError(f"{name} is outside the repository")
    return path.read_bytes()


def attach(text: str, files: list[Path], root: Path) -> str:
    """The message the model sees: what the user typed, then each mentioned text file's contents
    (image files go as images instead: agent/images.py)."""
    parts = [text]
    for path in files:
        if path.suffix.lower() in IMAGE_SUFFIXES:
            continue
        rel = path.relative_to(root.resolve())
        data = path.read_bytes()[:MAX_ATTACH_BYTES].decode("utf-8", errors="replace")
        parts.append(f'<attached_file path="{rel}">\n{data}\n</attached_file>')
    return "\n\n".join(parts)
