"""The inline question under a tool call in `ask` mode: y / n / a (always for this tool)."""

from __future__ import annotations

from rich.text import Text
from textual.widgets import Static


class ApprovalBar(Static):
    def ask(self, tool: str, title: str) -> None:
        self.update(
            Text.assemble(
                (f"Allow {tool}? ", "bold"), title[:200], "\n",
                ("y", "bold"), " yes · ", ("n", "bold"), " no · ", ("a", "bold"), f" always allow {tool} · ",
                "or type why not + Enter",
            )
        )
        self.display = True

    def hide(self) -> None:
        self.display = False
