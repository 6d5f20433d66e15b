"""The status line: model, effort, context used vs window, tokens in/out, cache hits, mode, elapsed."""

from __future__ import annotations

from dataclasses import dataclass

from rich.text import Text
from textual.widgets import Static

from agent.events import UsageEvent


@dataclass
class Stats:
    model: str = ""
    effort: str = "default"  # no level set: the model's own
    mode: str = "ask"
    context_window: int = 131_072
    context_tokens: int = 0
    prompt_tokens: int = 0
    cached_tokens: int = 0
    completion_tokens: int = 0
    busy: bool = False

    def add_usage(self, usage: UsageEvent) -> None:
        self.prompt_tokens += usage.prompt_tokens
        self.cached_tokens += usage.cached_tokens
        self.completion_tokens += usage.completion_tokens
        self.context_tokens = usage.context_tokens

    @property
    def cache_hit_rate(self) -> float:
        return self.cached_tokens / self.prompt_tokens if self.prompt_tokens else 0.0


def human(n: int) -> str:
    if n < 1000:
        return str(n)
    if n < 10_000:
        return f"{n / 1000:.1f}k".replace(".0k", "k")
    if n < 1_000_000:
        return f"{n // 1000}k"
    return f"{n / 1_000_000:.1f}M"


def short_model(spec: str) -> str:
    kind, _, rest = spec.partition(":")
    tail = rest.rstrip("/").rsplit("/", 1)[-1] if rest else ""
    return f"{kind}:{tail}" if tail else spec


def clock_text(seconds: float) -> str:
    seconds = int(seconds)
    h, rem = divmod(seconds, 3600)
    return f"{h}:{rem // 60:02d}:{rem % 60:02d}" if h else f"{rem // 60:02d}:{rem % 60:02d}"


class StatusLine(Static):
    def __init__(self, stats: Stats, elapsed, **kwargs):
        super().__init__(**kwargs)
        self.stats = stats
        self.elapsed = elapsed  # callable -> seconds since the session began (a fixed clock in tests)

    def on_mount(self) -> None:
        self.set_interval(1.0, self.refresh)

    def render(self) -> Text:
        s = self.stats
        pct = 100 * s.context_tokens / s.context_window if s.context_window else 0
        wide = self.size.width >= 100
        rest = [
            f"effort {s.effort}",
            f"ctx {human(s.context_tokens)}/{human(s.context_window)}" + (f" {pct:.0f}%" if wide else ""),
            f"↑{human(s.prompt_tokens)} ↓{human(s.completion_tokens)}",
            f"cache {s.cache_hit_rate:.0%}",
            s.mode,
            clock_text(self.elapsed()),
        ]
        sep = " · "
        # The model name gives way first, so the numbers stay visible at 80 columns.
        room = self.size.width - 2 - len(sep.join(rest)) - len(sep)
        model = short_model(s.model)
        if len(model) > max(room, 4):
            model = model[: max(room, 4) - 1] + "…"
        line = ("● " if s.busy else "○ ") + sep.join([model, *rest])
        return Text(line, no_wrap=True, overflow="ellipsis")
