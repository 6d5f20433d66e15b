"""What the chat does to the workspace besides the agent's own tools: /undo, /diff, and rebuilding a
saved conversation for /resume."""

from __future__ import annotations

from dataclasses import dataclass

from agent.events import Compacted, MessageAppended
from agent.tui.session import Record
from inference.chat.messages import Message

WORKDIR = "/workspace"

DIFF_COMMAND = (
    "git rev-parse --is-inside-work-tree >/dev/null 2>&1 || { echo 'not a git repository'; exit 3; }; "
    "git --no-pager diff --no-color HEAD; "
    "git ls-files -z --others --exclude-standard | "
    "xargs -0 -r -n1 git --no-pager diff --no-color --no-index /dev/null; true"
)


@dataclass
class Snapshot:
    path: str
    before: bytes | None  # None: the file did not exist, so undo deletes it


class EditHistory:
    """File contents before each approved edit, newest last. Only edits made through the edit tools
    are tracked; what a bash command changes is visible in /diff but not undoable here."""

    def __init__(self, sandbox, workdir: str = WORKDIR):
        self.sandbox = sandbox
        self.workdir = workdir
        self.stack: list[Snapshot] = []

    def resolve(self, path: str) -> str:
        return path if path.startswith("/") else f"{self.workdir.rstrip('/')}/{path}"

    def snapshot(self, path: str) -> None:
        if not path:
            return
        path = self.resolve(path)
        try:
            before = self.sandbox.read_file(path)
        except Exception:  # a missing file (create) reads as an error in every sandbox flavour
            before = None
        if isinstance(before, str):
            before = before.encode()
        self.stack.append(Snapshot(path, before))

    def undo(self) -> str:
        if not self.stack:
            return "nothing to undo"
        snap = self.stack.pop()
        if snap.before is None:
            self.sandbox.exec_once(["rm", "-f", "--", snap.path])
            return f"removed {snap.path} (it was created by the undone edit)"
        self.sandbox.write_file(snap.path, snap.before)
        return f"restored {snap.path} to its state before the last edit"

    def clear(self) -> None:
        self.stack.clear()


def workspace_diff(sandbox, workdir: str = WORKDIR) -> str:
    """Tracked changes against HEAD plus untracked files, without touching the repository's index.
    Runs outside the agent's persistent shell, so it is safe while the agent works."""
    return sandbox.exec_once(DIFF_COMMAND, timeout=60, workdir=workdir).output


def restore_conversation(records: list[Record]) -> list[Message]:
    """The conversation as the agent last had it: appended messages, replaced on compaction.

    A session killed between a tool call and its result leaves calls without results; each gets a
    placeholder result so the conversation stays valid for the next model call."""
    messages: list[Message] = []
    for record in records:
        if isinstance(record, MessageAppended):
            messages.append(Message.model_validate(record.message))
        elif isinstance(record, Compacted):
            messages = [Message.model_validate(m) for m in record.messages]
    answered = {m.tool_call_id for m in messages if m.role == "tool"}
    repaired: list[Message] = []
    for message in messages:
        repaired.append(message)
        for call in (message.tool_calls or []) if message.role == "assistant" else []:
            if call.id not in answered:
                repaired.append(
                    Message.tool("not run: the session ended before this call", tool_call_id=call.id, name=call.name)
                )
    return repaired
