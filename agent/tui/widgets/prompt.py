"""The prompt: Tab completes /commands and @paths; y/n/a answer a pending approval."""

from __future__ import annotations

from pathlib import Path

from textual import events
from textual.binding import Binding
from textual.widgets import Input

from agent.tui.completion import complete

APPROVAL_KEYS = {"y": "yes", "n": "no", "a": "always"}


class PromptInput(Input):
    BINDINGS = [Binding("tab", "complete", "complete", show=False)]

    def __init__(self, root: Path, **kwargs):
        super().__init__(**kwargs)
        self.root = root

    def action_complete(self) -> None:
        new_text, candidates = complete(self.value, self.root)
        if new_text != self.value:
            self.value = new_text
            self.cursor_position = len(new_text)
        if len(candidates) > 1:
            shown = "  ".join(candidates[:12]) + ("  …" if len(candidates) > 12 else "")
            self.app.notify(shown, title="completions", timeout=4)

    async def _on_key(self, event: events.Key) -> None:
        app = self.app
        if getattr(app, "approval_pending", False) and not self.value and event.key in APPROVAL_KEYS:
            event.stop()
            event.prevent_default()
            app.answer_approval(APPROVAL_KEYS[event.key])
            return
        await super()._on_key(event)
