"""The Textual app: conversation, approval bar, prompt and status line around a ChatController."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Callable

from textual.app import App, ComposeResult
from textual.binding import Binding
from textual.css.query import NoMatches
from textual.message import Message as TextualMessage
from textual.widgets import Static

from agent.events import RunStart, ToolCallEvent, UsageEvent
from agent.instructions import build_system_prompt, load_project_instructions
from agent.loop import Approval
from agent.ownership import Owner
from agent.tui.approval import EDIT_TOOLS, MODES
from agent.images import ImageFileError, mentioned_images
from agent.tui.completion import attach, mentioned_files, read_in_repo
from agent.tui.controller import ApprovalRequest, ChatController, TurnDone
from agent.tui.session import Notice, SessionStore, UserTurn
from agent.tui.slash import DEFAULT_EFFORT, SlashHandler
from agent.tui.widgets.approval_bar import ApprovalBar
from agent.tui.widgets.blocks import tool_title
from agent.tui.widgets.conversation import ConversationView
from agent.tui.widgets.prompt import PromptInput
from agent.tui.widgets.status_line import Stats, StatusLine


CHAT_ADDENDUM = """\
This is an interactive session in a terminal: a developer reads every reply and writes the next
message, so the rule above about not asking questions does not apply; ask when the request is
ambiguous. Answer in Markdown. When a request is done, reply with a short answer and no tool call."""


def chat_system_prompt(config, repo: Path) -> str:
    return build_system_prompt(config, load_project_instructions(repo)) + "\n\n" + CHAT_ADDENDUM


class AgentPost(TextualMessage):
    """Anything the worker thread hands to the UI thread (events, approval requests, turn ends)."""

    def __init__(self, payload: object):
        super().__init__()
        self.payload = payload


class ChatApp(App):
    CSS_PATH = "chat.tcss"
    TITLE = "Horizon"
    BINDINGS = [
        Binding("escape", "interrupt", "interrupt", priority=True, show=False),
        Binding("ctrl+c", "ctrl_c", "interrupt / exit", priority=True, show=False),
        Binding("shift+tab", "cycle_mode", "approval mode", priority=True, show=False),
        Binding("ctrl+q", "quit_chat", "quit", priority=True, show=False),  # stop the agent before leaving
    ]

    def __init__(
        self,
        *,
        config,
        backend,
        tools,
        sandbox,
        store: SessionStore,
        repo: Path,
        model_spec: str,
        read_only: bool = False,
        make_backend: Callable | None = None,
        resume_id: str | None = None,
        resume_latest: bool = False,
        clock: Callable[[], float] = time.monotonic,
    ):
        super().__init__()
        self.repo = Path(repo)
        self.store = store
        self.read_only = read_only
        self.make_backend = make_backend
        self.clock = clock
        self._started = clock()
        session = store.open(resume_id) if (resume_id or resume_latest) else store.create(str(repo), model_spec)
        self._resuming = session if (resume_id or resume_latest) else None
        self.controller = ChatController(
            config=config,
            backend=backend,
            tools=tools,
            sandbox=sandbox,
            session=session,
            post=self._post,
            system_prompt=chat_system_prompt(config, self.repo),
            owner=None if read_only else Owner.for_repo(self.repo),
        )
        self.stats = Stats(
            model=model_spec,
            effort=config.reasoning_effort or DEFAULT_EFFORT,
            mode=self.controller.policy.mode,
            context_window=config.context.context_window,
        )
        self.slash = SlashHandler(self)
        self._pending: ApprovalRequest | None = None
        self._exit_armed = False
        self._loop: asyncio.AbstractEventLoop | None = None  # set once mounted, for request_quit

    # -- layout -------------------------------------------------------------------------------
    def compose(self) -> ComposeResult:
        access = "read-only" if self.read_only else "read-write"
        yield Static(f"[b]Horizon[/b] · {self.repo.name} ({access}) · /help for commands", id="header")
        yield ConversationView(id="conversation")
        yield ApprovalBar(id="approval")
        yield PromptInput(self.repo, placeholder="Ask Horizon… (@file to attach, /help)", id="prompt")
        yield StatusLine(self.stats, lambda: self.clock() - self._started, id="status")

    async def on_mount(self) -> None:
        self._loop = asyncio.get_running_loop()
        self.query_one(ApprovalBar).hide()
        self.query_one(PromptInput).focus()
        if self._resuming is not None:
            await self.restore(self._resuming)

    @property
    def conversation(self) -> ConversationView:
        return self.query_one(ConversationView)

    # -- worker thread -> UI ------------------------------------------------------------------
    def _post(self, payload: object) -> None:
        self.post_message(AgentPost(payload))

    async def on_agent_post(self, message: AgentPost) -> None:
        payload = message.payload
        try:
            attached = self.conversation.is_attached
        except NoMatches:  # later still in the shutdown: the view is already removed from the screen
            attached = False
        if not attached:
            # Quitting: exit() ran while the stopped worker's last events (an interrupted command's
            # failed output, the finish) were still queued. They are already in the session file;
            # mounting them into the closing app raises MountError.
            return
        if isinstance(payload, ApprovalRequest):
            await self._ask(payload)
        elif isinstance(payload, TurnDone):
            self.stats.busy = False
            self.controller.session.save_meta()  # keeps /sessions ordered by last use
            if payload.error:
                await self.notice(f"the agent failed: {payload.error}", kind="error")
        else:
            await self.show(payload)
        self.query_one(StatusLine).refresh()

    async def show(self, record) -> None:
        if isinstance(record, UsageEvent):
            self.stats.add_usage(record)
        elif isinstance(record, ToolCallEvent) and not self.controller.policy.needs_user(record.name):
            await self.conversation.apply(record)
            self.conversation.tools[record.call_id].mark_running()
            return
        await self.conversation.apply(record)

    async def notice(self, text: str, format: str = "text", kind: str = "info") -> None:
        """Show a line and keep it in the session, so a resumed session shows it too."""
        record = Notice(text=text, format=format, kind=kind)
        self.controller.session.append(record)
        await self.conversation.apply(record)

    # -- approvals ----------------------------------------------------------------------------
    async def _ask(self, request: ApprovalRequest) -> None:
        if request.answer.done():  # interrupted before the UI got to it
            return
        self._pending = request
        block = self.conversation.tools.get(request.call.call_id)
        if block is not None and request.call.name in EDIT_TOOLS:
            await block.show_preview(await asyncio.to_thread(self._read_text, request.call.arguments.get("path")))
        self.query_one(ApprovalBar).ask(request.call.name, tool_title(request.call.name, request.call.arguments))

    def _read_text(self, path) -> str | None:
        try:
            data = self.controller.sandbox.read_file(self.controller.edits.resolve(str(path or "")))
        except Exception:  # missing file (create), or a path the edit tool will reject anyway
            return None
        return data.decode("utf-8", errors="replace") if isinstance(data, bytes) else data

    def answer_approval(self, decision: str, reason: str = "") -> None:
        request, self._pending = self._pending, None
        self.query_one(ApprovalBar).hide()
        if request is None or request.answer.done():
            return
        name = request.call.name
        if decision == "always":
            self.controller.policy.always_allowed.add(name)
        if decision in ("yes", "always"):
            block = self.conversation.tools.get(request.call.call_id)
            if block is not None:
                block.mark_running()
            request.answer.set_result(Approval.approve())
        else:
            request.answer.set_result(Approval.deny(reason or "the user declined this tool call"))

    @property
    def approval_pending(self) -> bool:
        return self._pending is not None

    # -- input --------------------------------------------------------------------------------
    async def on_input_submitted(self, event: PromptInput.Submitted) -> None:
        text = event.value.strip()
        event.input.value = ""
        self._exit_armed = False
        if self._pending is not None:
            if text:
                self.answer_approval("no", reason=f"the user declined and said: {text}")
            return
        if not text:
            return
        if await self.slash.dispatch(text):
            return
        if self.controller.busy:
            await self.notice("the agent is still working: Esc interrupts it", kind="warning")
            return
        files = mentioned_files(text, self.repo)
        try:  # @shot.png goes to the model as the image itself
            images = mentioned_images(text, lambda name: read_in_repo(self.repo, name))
        except ImageFileError as exc:
            await self.notice(str(exc), kind="error")
            return
        if images and not self.controller.agent.sees_images:
            await self.notice(f"{images[0].where}: this model cannot see images; send it without the image, "
                              "or chat with a vision model (GLM-5.3-Flash)", kind="error")
            return
        rel = [str(p.relative_to(self.repo.resolve())) for p in files]
        self.controller.record(UserTurn(text=text, attachments=rel))
        self.stats.busy = True
        self.controller.submit(attach(text, files, self.repo), images)

    # -- keys ---------------------------------------------------------------------------------
    async def action_interrupt(self) -> None:
        if self.controller.busy:
            self._interrupt()

    async def action_ctrl_c(self) -> None:
        if self.controller.busy:
            self._interrupt()
            self._exit_armed = True
            self.notify("interrupted: press Ctrl+C again to exit", timeout=3)
        elif self._exit_armed:
            await self.action_quit_chat()
        else:
            self._exit_armed = True
            self.notify("press Ctrl+C again to exit", timeout=3)

    def _interrupt(self) -> None:
        self.query_one(ApprovalBar).hide()
        self._pending = None
        self.controller.interrupt()

    def action_cycle_mode(self) -> None:
        self.set_mode(self.controller.policy.cycle())

    def set_mode(self, mode: str) -> None:
        if mode not in MODES:
            raise ValueError(f"mode must be one of {', '.join(MODES)}, got {mode!r}")
        self.controller.policy.mode = mode
        self.stats.mode = mode
        self.query_one(StatusLine).refresh()
        if self._pending is not None and not self.controller.policy.needs_user(self._pending.call.name):
            self.answer_approval("yes")

    async def action_quit_chat(self) -> None:
        if self.controller.busy:
            self.controller.interrupt()
            await asyncio.to_thread(self.controller.wait, 10.0)
        self.controller.session.save_meta()
        self.exit()

    def request_quit(self) -> None:
        """Quit as Ctrl+Q does (agent stopped, session saved). Safe from a signal handler or another
        thread; before the app is up (or after it ended) it raises KeyboardInterrupt instead."""
        loop = self._loop
        if loop is None or loop.is_closed() or not self.is_running:
            raise KeyboardInterrupt
        loop.call_soon_threadsafe(self.call_next, self.action_quit_chat)

    # -- sessions -----------------------------------------------------------------------------
    async def restore(self, session) -> None:
        records = self.controller.resume(session)
        await self.conversation.clear()
        self.stats.prompt_tokens = self.stats.cached_tokens = self.stats.completion_tokens = 0
        self.stats.context_tokens = 0
        for record in records:
            if isinstance(record, UsageEvent):
                self.stats.add_usage(record)
            if not isinstance(record, RunStart):
                await self.conversation.apply(record)
        await self.notice(f"resumed session {session.id} ({len(records)} records)")
        self.conversation.scroll_end(animate=False)
        self.query_one(StatusLine).refresh()
