"""The slash commands: names, argument hints and help text, plus Tab completion over them."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class SlashCommand:
    name: str
    args: str
    help: str


COMMANDS: tuple[SlashCommand, ...] = (
    SlashCommand("help", "", "show commands and keys"),
    SlashCommand("model", "[SPEC]", "show the model, or switch to another spec"),
    SlashCommand("effort", "[LEVEL]", "reasoning effort: none|low|medium|high|max|default"),
    SlashCommand("mode", "ask|auto-edit|auto", "set the approval mode (Shift+Tab cycles)"),
    SlashCommand("compact", "", "compact the conversation now"),
    SlashCommand("diff", "", "show the workspace changes so far"),
    SlashCommand("undo", "", "revert the last turn's file changes"),
    SlashCommand("clear", "", "new conversation (the old one stays saved)"),
    SlashCommand("sessions", "", "list saved sessions"),
    SlashCommand("resume", "[ID]", "restore a saved session (default: the latest)"),
    SlashCommand("tools", "", "list the tools the agent can call"),
    SlashCommand("exit", "", "save and quit"),
)
BY_NAME = {c.name: c for c in COMMANDS}


def parse(line: str) -> tuple[str, str] | None:
    """'/effort high' -> ('effort', 'high'); None when the line is not a slash command."""
    if not line.startswith("/") or line.startswith("//"):
        return None
    name, _, rest = line[1:].partition(" ")
    return name.strip().lower(), rest.strip()


def complete_command(prefix: str) -> list[str]:
    """Command names starting with `prefix` (without the slash)."""
    return [c.name for c in COMMANDS if c.name.startswith(prefix.lower())]


KEYS = (
    ("Esc", "interrupt the agent"),
    ("Ctrl+C", "interrupt; press again to exit"),
    ("Shift+Tab", "cycle the approval mode"),
    ("Tab", "complete a /command or an @path"),
    ("@path", "attach a file to your message"),
)


def help_text() -> str:
    """Two aligned columns: compact enough to read whole in an 80x24 terminal."""
    rows = [(f"/{c.name} {c.args}".rstrip(), c.help) for c in COMMANDS]
    rows += list(KEYS)
    width = max(len(left) for left, _ in rows) + 2
    return "\n".join(left.ljust(width) + right for left, right in rows)
