"""The chat controller: owns the agent, runs each turn in a worker thread, bridges approvals.

The UI never touches the agent directly. The controller writes every event to the session file as
it happens and hands it to `post` (the app's thread-safe message queue). Approvals that need the
user are posted as a Future which the worker thread waits on; an interrupt resolves it as a denial.
"""

from __future__ import annotations

import threading
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Callable

from agent.config import AgentConfig
from agent.events import Event, ToolCallEvent
from agent.loop import Agent, Approval, RunResult
from agent.ownership import Owner, give_back_created
from agent.tools.toolset import ToolSet
from agent.tui.approval import EDIT_TOOLS, ApprovalPolicy
from agent.tui.session import Notice, Record, Session
from agent.tui.turn_snapshots import TurnSnapshots
from agent.tui.workspace_ops import WORKDIR, EditHistory, restore_conversation
from inference.chat.content_parts import ImagePart
from inference.chat.messages import Message


@dataclass
class ApprovalRequest:
    call: ToolCallEvent
    answer: Future  # resolved with an Approval by the UI thread


@dataclass
class TurnDone:
    result: RunResult | None
    error: str | None = None


class ChatController:
    def __init__(
        self,
        *,
        config: AgentConfig,
        backend,
        tools: ToolSet,
        sandbox,
        session: Session,
        post: Callable[[object], None],
        policy: ApprovalPolicy | None = None,
        system_prompt: str | None = None,
        owner: Owner | None = None,
    ):
        self.system_prompt = system_prompt
        # Whose the mounted checkout is: what the agent (root in the sandbox) creates goes back to
        # them after every turn, so the user can edit, delete and commit it.
        self.owner = owner
        self.config = config
        self.backend = backend
        self.tools = tools
        self.sandbox = sandbox
        self.session = session
        self.post = post
        read_only = frozenset(name for name in tools.names if getattr(tools[name], "read_only", False))
        self.policy = policy or ApprovalPolicy(read_only_tools=read_only)
        self.policy.read_only_tools = read_only
        self.edits = EditHistory(sandbox)
        self.turns = TurnSnapshots(sandbox, WORKDIR)
        self.turn = 0
        self.note_for_model: str | None = None  # said with the next message (e.g. after /undo)
        self.agent = self._new_agent([])
        self._thread: threading.Thread | None = None
        self._pending: Future | None = None

    # -- turns --------------------------------------------------------------------------------
    @property
    def busy(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def submit(self, task: str, images: list[ImagePart] | None = None) -> None:
        """Run a turn; `images` (image parts at offsets in `task`) go with the message."""
        if self.busy:
            raise RuntimeError("the agent is still working; interrupt it first")
        if self.note_for_model:
            prefix = f"{self.note_for_model}\n\n"
            task, self.note_for_model = prefix + task, None
            images = [p.model_copy(update={"at": p.at + len(prefix)}) for p in images or []]
        self._thread = threading.Thread(target=self._run_turn, args=(task, images or None), name="horizon-agent",
                                        daemon=True)
        self._thread.start()

    def _run_turn(self, task: str, images: list[ImagePart] | None = None) -> None:
        self.turn += 1
        try:
            # Before the agent touches anything: /undo reverts the whole turn, commands included.
            self.turns.take(self.turn)
        except Exception as exc:  # undo falls back to the edit tools' history; the turn goes on
            self.turns.error = f"{type(exc).__name__}: {exc}"
        try:
            result = self.agent.run(task, images=images)
        except Exception as exc:  # the UI must survive any agent failure and say what happened
            self.give_back_files()
            self.post(TurnDone(None, f"{type(exc).__name__}: {exc}"))
            return
        self.give_back_files()
        self.post(TurnDone(result))

    def give_back_files(self) -> None:
        if self.owner is None:
            return
        try:
            give_back_created(self.owner, self.sandbox, WORKDIR)
        except Exception as exc:  # the files stay root-owned; say so rather than fail the turn
            self.record(Notice(text=f"could not return new files to their owner ({self.owner}): {exc}", kind="warning"))

    def interrupt(self) -> None:
        self.agent.interrupt()  # also stops a bash command in flight (Sandbox.interrupt)
        pending = self._pending
        if pending is not None and not pending.done():
            pending.set_result(Approval.deny("interrupted by the user"))

    def wait(self, timeout: float = 10.0) -> None:
        if self._thread is not None:
            self._thread.join(timeout)

    # -- events and approvals (called on the worker thread) -----------------------------------
    def _on_event(self, event: Event) -> None:
        self.record(event)

    def record(self, record: Record) -> None:
        self.session.append(record)
        self.post(record)

    def _approve(self, call: ToolCallEvent) -> Approval:
        if self.policy.needs_user(call.name):
            future: Future = Future()
            self._pending = future
            self.post(ApprovalRequest(call, future))
            decision = future.result()
            self._pending = None
        else:
            decision = Approval.approve()
        if decision.approved and call.name in EDIT_TOOLS:
            self.edits.snapshot(str(call.arguments.get("path", "")))
        return decision

    # -- conversation state -------------------------------------------------------------------
    def _new_agent(self, messages: list[Message]) -> Agent:
        return Agent(
            self.config,
            self.backend,
            self.tools,
            on_event=self._on_event,
            approver=self._approve,
            system_prompt=self.system_prompt,
            messages=messages,
        )

    def reset(self, session: Session) -> None:
        """/clear: a fresh conversation in a new session file."""
        self.session = session
        self.agent = self._new_agent([])
        self.edits.clear()
        self.turns.clear()

    def resume(self, session: Session) -> list[Record]:
        records = session.records()
        self.session = session
        self.agent = self._new_agent(restore_conversation(records))
        self.edits.clear()
        self.turns.clear()
        return records

    def set_backend(self, backend) -> None:
        """Switch models (only while idle). The old backend is closed: an embedded one holds a whole
        model and its KV cache, and would otherwise live until the process exits."""
        old, self.backend = self.backend, backend
        self.agent.backend = backend
        if old is not backend:
            old.close()
