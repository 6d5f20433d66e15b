"""What each slash command does. Commands that touch the workspace or the conversation wait until the
agent is idle, since the sandbox shell and the message list belong to the running turn."""

from __future__ import annotations

import asyncio
import time
from agent.config import EFFORT_ALIASES, REASONING_EFFORTS
from agent.context import ContextManager
from agent.tui import commands
from agent.tui.approval import EDIT_TOOLS
from agent.tui.workspace_ops import workspace_diff

# `none` is a real level (no thinking at all); `default` leaves the choice to the model (it thinks at max).
DEFAULT_EFFORT = "default"


def supported_efforts() -> list[str]:
    return [*REASONING_EFFORTS, DEFAULT_EFFORT]


def effort_setting(word: str) -> str | None:
    """What the agent config holds for an /effort or --effort word: a level, or None for the default."""
    word = EFFORT_ALIASES.get(word.lower(), word.lower())
    if word not in supported_efforts():
        raise ValueError(f"effort takes one of {'|'.join(supported_efforts())}, got {word!r}")
    return None if word == DEFAULT_EFFORT else word


NEEDS_IDLE = {"model", "compact", "undo", "clear", "resume"}


class SlashHandler:
    def __init__(self, app):
        self.app = app

    @property
    def controller(self):
        return self.app.controller

    async def dispatch(self, line: str) -> bool:
        parsed = commands.parse(line)
        if parsed is None:
            return False
        name, arg = parsed
        if name not in commands.BY_NAME:
            close = commands.complete_command(name[:2]) if name else []
            hint = f" (did you mean {', '.join('/' + c for c in close)}?)" if close else ""
            await self.app.notice(f"unknown command /{name}{hint}; /help lists them", kind="error")
            return True
        if name in NEEDS_IDLE and self.controller.busy and not (name == "model" and not arg):
            await self.app.notice(f"/{name} waits until the agent is idle (Esc interrupts it)", kind="warning")
            return True
        await getattr(self, f"cmd_{name}")(arg)
        self.app.query_one("#status").refresh()
        return True

    async def cmd_help(self, arg: str) -> None:
        await self.app.notice(commands.help_text())

    async def cmd_model(self, arg: str) -> None:
        if not arg:
            await self.app.notice(f"model: {self.app.stats.model}")
            return
        if self.app.make_backend is None:
            await self.app.notice("this session cannot switch models", kind="error")
            return
        try:
            backend = await asyncio.to_thread(self.app.make_backend, arg, self.controller.config)
        except Exception as exc:
            await self.app.notice(f"cannot use model {arg!r}: {exc}", kind="error")
            return
        self.controller.set_backend(backend)
        self.app.stats.model = arg
        await self.app.notice(f"model: {arg}")

    async def cmd_effort(self, arg: str) -> None:
        if not arg:
            await self.app.notice(f"reasoning effort: {self.app.stats.effort}")
            return
        try:
            setting = effort_setting(arg)
        except ValueError as exc:
            await self.app.notice(f"/{exc}", kind="error")
            return
        self.controller.config.reasoning_effort = setting
        self.app.stats.effort = setting or DEFAULT_EFFORT
        await self.app.notice(f"reasoning effort: {self.app.stats.effort}")

    async def cmd_mode(self, arg: str) -> None:
        try:
            self.app.set_mode(arg)
        except ValueError as exc:
            await self.app.notice(str(exc), kind="error")
            return
        await self.app.notice(f"approval mode: {arg}")

    async def cmd_compact(self, arg: str) -> None:
        """The agent's own staged compaction, forced: old observations elided and the middle turns
        summarised by the model, keeping the stable prefix and the recent turns verbatim."""
        agent = self.controller.agent
        before = agent.context.estimate_tokens(agent.messages)
        # A target of zero makes eliding alone never enough, and the window as the last context size
        # pulls the trigger; the ContextManager API has no explicit "compact now" yet.
        forced = ContextManager(agent.context.config.model_copy(update={"compact_target": 0.0}))
        forced.tokens_per_char = agent.context.tokens_per_char
        window = agent.context.config.context_window
        compaction = await asyncio.to_thread(forced.maybe_compact, agent.messages, window, agent.backend)
        if compaction is None:
            await self.app.notice("nothing to compact yet: the conversation is only the kept first and recent turns")
            return
        compaction.event.tokens_before = before
        # As the loop's own compactions: the history, the summary request's usage (counted in the
        # totals and the status line), and its errors and event, all recorded in the session.
        agent.apply_compaction(compaction)

    async def cmd_diff(self, arg: str) -> None:
        diff = await asyncio.to_thread(workspace_diff, self.controller.sandbox)
        if not diff.strip():
            await self.app.notice("no changes in the workspace")
        elif diff.strip() == "not a git repository":
            await self.app.notice("/diff needs the workspace to be a git repository", kind="warning")
        else:
            await self.app.notice(diff, format="diff")

    async def cmd_undo(self, arg: str) -> None:
        """Revert the last turn's changes to the workspace (edits and commands alike) from the
        snapshot taken when it started; where snapshots are unavailable (no git in the image),
        revert the last edit-tool change instead."""
        controller = self.controller
        if controller.turns.stack or controller.turns.error is None:
            turn, message = await asyncio.to_thread(controller.turns.undo)
            await asyncio.to_thread(controller.give_back_files)  # restored files are written as root
            if turn is not None:
                controller.edits.clear()  # those per-edit states predate the restored snapshot
                controller.note_for_model = (
                    f"[The user ran /undo: the workspace was restored to its state before turn {turn}; "
                    "the file changes made since then are gone, though the conversation still shows them.]"
                )
            await self.app.notice(message, kind="info" if turn is not None else "warning")
            return
        message = await asyncio.to_thread(controller.edits.undo)
        await self.app.notice(f"{message} (whole-turn undo is unavailable: {controller.turns.error})")

    async def cmd_clear(self, arg: str) -> None:
        session = self.app.store.create(str(self.app.repo), self.app.stats.model)
        self.controller.reset(session)
        await self.app.conversation.clear()
        s = self.app.stats
        s.prompt_tokens = s.cached_tokens = s.completion_tokens = s.context_tokens = 0
        await self.app.notice("new conversation")

    async def cmd_sessions(self, arg: str) -> None:
        metas = self.app.store.list()
        if not metas:
            await self.app.notice("no saved sessions")
            return
        rows = []
        for meta in metas[:20]:
            when = time.strftime("%Y-%m-%d %H:%M", time.localtime(meta.updated))
            mark = "*" if meta.id == self.controller.session.id else " "
            rows.append(f"{mark} {meta.id}  {when}  {meta.title or '—'}")
        await self.app.notice("\n".join(rows) + "\n/resume ID opens one (* = this session)")

    async def cmd_resume(self, arg: str) -> None:
        try:
            session = self.app.store.open(arg or None)
        except LookupError as exc:
            await self.app.notice(str(exc), kind="error")
            return
        await self.app.restore(session)

    async def cmd_tools(self, arg: str) -> None:
        tools = self.controller.tools
        rows = []
        width = max((len(n) for n in tools.names), default=0) + 2
        for name in tools.names:
            tool = tools[name]
            first = (tool.description().split(". ") or [""])[0].splitlines()[0]
            asks = "never asks" if getattr(tool, "read_only", False) else (
                "asks in ask" if name in EDIT_TOOLS else "asks in ask, auto-edit")
            rows.append(f"{name.ljust(width)}{first} ({asks})")
        await self.app.notice("\n".join(rows))

    async def cmd_exit(self, arg: str) -> None:
        await self.app.action_quit_chat()
