"""Coloured unified diffs that stay readable on light and dark themes (colours come from the theme)."""

from __future__ import annotations

import difflib

from rich.text import Text
from textual.widgets import Static

from agent.tools.files import diff_labels


def looks_like_diff(text: str) -> bool:
    lines = text.splitlines()
    return any(l.startswith("@@") for l in lines) and any(l.startswith(("+", "-")) for l in lines)


def edit_preview(tool: str, args: dict, current: str | None) -> str | None:
    """The change an edit tool is about to make, as a diff against the file's current text (None when
    it does not exist), so `ask` mode can show it before it runs."""
    path = str(args.get("path", "?"))
    before = current or ""
    if tool == "str_replace":
        old, new = str(args.get("old_str", "")), str(args.get("new_str", ""))
        after = before.replace(old, new, 1) if old and old in before else None
        if after is None:  # the edit will fail; show what it was trying to do
            before, after = old, new
    elif tool == "create":
        after = str(args.get("file_text", ""))
    elif tool == "insert":
        lines = before.splitlines(keepends=True)
        at = int(args.get("insert_line", 0) or 0)
        text = str(args.get("text", ""))
        after = "".join(lines[:at]) + text + ("" if text.endswith("\n") else "\n") + "".join(lines[at:])
    else:
        return None
    diff = difflib.unified_diff(before.splitlines(keepends=True), after.splitlines(keepends=True), *diff_labels(path), n=2)
    return "".join(line if line.endswith("\n") else line + "\n" for line in diff)


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
