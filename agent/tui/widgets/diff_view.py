"""Coloured unified diffs that stay readable on light and dark themes (colours come from the theme)."""

from __future__ import annotations

import difflib

from rich.text import Text
from textual.widgets import Static


def looks_like_diff(text: str) -> bool:
    lines = text.splitlines()
    return any(l.startswith("@@") for l in lines) and any(l.startswith(("+", "-")) for l in lines)


def edit_preview(tool: str, args: dict) -> str | None:
    """The change an edit tool is about to make, as a diff, so `ask` mode can show it before running."""
    path = str(args.get("path", "?"))
    if tool == "str_replace":
        old, new = str(args.get("old_str", "")), str(args.get("new_str", ""))
    elif tool == "create":
        old, new = "", str(args.get("file_text", args.get("content", "")))
    elif tool == "insert":
        old, new = "", str(args.get("new_str", args.get("text", "")))
    else:
        return None
    lines = difflib.unified_diff(
        old.splitlines(keepends=True), new.splitlines(keepends=True), f"a/{path}", f"b/{path}", n=2
    )
    return "".join(line if line.endswith("\n") else line + "\n" for line in lines)


class DiffView(Static):
    DEFAULT_CSS = "DiffView { height: auto; }"

    def __init__(self, diff: str, **kwargs):
        super().__init__(**kwargs)
        self.diff = diff

    def render(self) -> Text:
        theme = self.app.current_theme
        added, removed, hunk = theme.success or "green", theme.error or "red", theme.accent or "cyan"
        text = Text(no_wrap=False, overflow="fold")
        for line in self.diff.rstrip("\n").splitlines():
            if line.startswith(("+++", "---", "diff --git", "index ")):
                style = "bold"
            elif line.startswith("+"):
                style = added
            elif line.startswith("-"):
                style = removed
            elif line.startswith("@@"):
                style = hunk
            else:
                style = ""
            text.append(line + "\n", style=style)
        text.rstrip()
        return text
