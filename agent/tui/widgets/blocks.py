"""The blocks a conversation is made of: user turns, reasoning, answers, tool calls, notices."""

from __future__ import annotations

import json

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Vertical
from textual.widgets import Collapsible, Markdown, Static

from agent.tui.widgets.diff_view import DiffView, edit_preview, looks_like_diff

OUTPUT_PREVIEW_CHARS = 20_000


# User, model and tool text is wrapped in Text, never parsed as markup: "[ID]" or "[b]" stay literal.


class UserBlock(Static):
    def __init__(self, text: str, attachments: list[str]):
        body = Text.assemble(("› ", "bold"), text)
        if attachments:
            body.append("\n  attached: " + ", ".join(attachments), style="dim")
        super().__init__(body, classes="user")


class NoticeBlock(Static):
    def __init__(self, text: str, kind: str = "info"):
        super().__init__(Text(text), classes=f"notice {kind}")


class MarkdownNotice(Markdown):
    def __init__(self, text: str):
        super().__init__(text, classes="notice info")


class ReasoningBlock(Collapsible):
    """Streams expanded while the model thinks, folds away when it moves on."""

    def __init__(self):
        self.body = Static("", classes="reasoning-text")
        self.text = ""
        super().__init__(self.body, title="Thinking…", collapsed=False, classes="reasoning")

    def add(self, delta: str) -> None:
        self.text += delta
        self.body.update(Text(self.text.strip()))

    def close(self) -> None:
        words = len(self.text.split())
        self.title = f"Thought ({words} words)"
        self.collapsed = True


class AnswerBlock(Markdown):
    """Markdown re-rendered at most every 50 ms while text streams in."""

    def __init__(self):
        super().__init__("", classes="answer")
        self.text = ""
        self._pending = False

    def add(self, delta: str) -> None:
        self.text += delta
        if not self._pending:
            self._pending = True
            self.set_timer(0.05, self._flush)

    def _flush(self) -> None:
        self._pending = False
        self.update(self.text)

    async def close(self) -> None:
        self._pending = False
        await self.update(self.text)


def tool_title(name: str, args: dict) -> str:
    """One line that says what the call does: `$ pytest -q`, `edit calc.py`, `view src/`."""
    if name == "bash":
        return "$ " + str(args.get("command", "")).strip().replace("\n", " ⏎ ")
    if name in ("str_replace", "insert"):
        return f"edit {args.get('path', '?')}"
    if name in ("create", "view", "outline"):
        extra = f" {args['view_range']}" if args.get("view_range") else ""
        return f"{name} {args.get('path', '.')}{extra}"
    if name == "search":
        return f"search {args.get('pattern', args.get('query', ''))!r} {args.get('path', '')}".rstrip()
    if name == "find_symbol":
        return f"find_symbol {args.get('name', args.get('symbol', ''))}"
    if name == "finish":
        return "finish"
    return f"{name} {json.dumps(args, ensure_ascii=False)}"


class ToolBlock(Vertical):
    """A compact header line plus a collapsible output (expanded for diffs)."""

    def __init__(self, call_id: str, name: str, args: dict):
        super().__init__(classes="tool")
        self.call_id, self.tool, self.args = call_id, name, args
        self.header = Static(classes="tool-header")
        self.state = "pending"
        self._set_header()

    def compose(self) -> ComposeResult:
        yield self.header

    def _set_header(self, detail: str = "") -> None:
        mark = {"pending": "○", "running": "◐", "ok": "●", "error": "✗", "denied": "⊘"}[self.state]
        title = tool_title(self.tool, self.args)
        self.header.update(Text.assemble((mark + " ", "bold"), title, ("  " + detail if detail else "", "dim")))
        self.set_class(self.state == "error", "failed")

    async def show_preview(self, current: str | None) -> None:
        """Before approval: the proposed edit as a diff against the file's current text."""
        preview = edit_preview(self.tool, self.args, current)
        if preview:
            await self.mount(DiffView(preview, classes="preview"))

    async def set_output(self, output: str, is_error: bool, exit_code: int | None, truncated: bool) -> None:
        for old in self.query(".preview"):
            await old.remove()
        denied = output.startswith("denied: ")  # how the loop reports an approver's refusal
        failed = is_error or exit_code not in (None, 0)
        self.state = "denied" if denied else ("error" if failed else "ok")
        lines = output.count("\n") + (1 if output and not output.endswith("\n") else 0)
        detail = [f"{lines} lines" if lines != 1 else "1 line"]
        if exit_code not in (None, 0):
            detail.append(f"exit {exit_code}")
        if truncated:
            detail.append("truncated")
        self._set_header(" · ".join(detail))
        if not output.strip() or self.tool == "finish":
            return
        shown = output[:OUTPUT_PREVIEW_CHARS]
        is_diff = looks_like_diff(shown)
        body = DiffView(shown) if is_diff else Static(Text(shown.rstrip()), classes="tool-output")
        expanded = is_diff or denied or (is_error and lines <= 12)
        await self.mount(Collapsible(body, title="output", collapsed=not expanded))

    def mark_running(self) -> None:
        self.state = "running"
        self._set_header()
