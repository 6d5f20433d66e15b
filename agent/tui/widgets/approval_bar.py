"""The inline question under a tool call in `ask` mode: y / n / a (always for this tool)."""

from __future__ import annotations

from rich.markup import escape
from textual.widgets import Static


class ApprovalBar(Static):
    def ask(self, tool: str, title: str) -> None:
        self.update(
            f"[b]Allow {escape(tool)}?[/b] {escape(title[:200])}\n"
            f"[b]y[/b] yes · [b]n[/b] no · [b]a[/b] always allow {escape(tool)} · "
            "or type a reason and Enter to deny · Shift+Tab mode"
        )
        self.display = True

    def hide(self) -> None:
        self.display = False
