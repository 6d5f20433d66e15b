"""The scrolling conversation: turns agent events (live or replayed from a session) into blocks."""

from __future__ import annotations

from textual.containers import VerticalScroll

from agent.events import (
    Compacted,
    ContentDelta,
    ErrorEvent,
    FinishEvent,
    MessageAppended,
    ReasoningDelta,
    ToolCallEvent,
    ToolOutput,
)
from agent.tui.session import Notice, Record, UserTurn
from agent.tui.widgets.diff_view import DiffView
from agent.tui.widgets.blocks import (
    AnswerBlock,
    MarkdownNotice,
    NoticeBlock,
    ReasoningBlock,
    ToolBlock,
    UserBlock,
)


def notice_widget(notice: Notice):
    if notice.format == "markdown":
        return MarkdownNotice(notice.text)
    if notice.format == "diff":
        return DiffView(notice.text, classes=f"notice {notice.kind}")
    return NoticeBlock(notice.text, kind=notice.kind)


class ConversationView(VerticalScroll):
    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.tools: dict[str, ToolBlock] = {}
        self._reasoning: ReasoningBlock | None = None
        self._answer: AnswerBlock | None = None
        self._streamed_in_step = False
        self._last_answer = ""

    def on_mount(self) -> None:
        self.anchor()  # stay at the bottom while output streams, unless the user scrolls up

    async def apply(self, record: Record) -> None:
        if isinstance(record, UserTurn):
            await self._close_stream()
            await self.mount(UserBlock(record.text, record.attachments))
        elif isinstance(record, Notice):
            await self.mount(notice_widget(record))
        elif isinstance(record, ReasoningDelta):
            await self._add_reasoning(record.text)
        elif isinstance(record, ContentDelta):
            await self._add_answer(record.text)
        elif isinstance(record, MessageAppended):
            await self._message(record.message)
        elif isinstance(record, ToolCallEvent):
            await self._close_stream()
            block = ToolBlock(record.call_id, record.name, record.arguments)
            self.tools[record.call_id] = block
            await self.mount(block)
        elif isinstance(record, ToolOutput):
            block = self.tools.get(record.call_id)
            if block is not None:
                await block.set_output(record.output, record.is_error, record.exit_code, record.truncated)
        elif isinstance(record, ErrorEvent) and record.kind != "tool_error":  # the tool block shows those
            await self.mount(NoticeBlock(f"{record.kind}: {record.message}", kind="error"))
        elif isinstance(record, Compacted):
            text = f"context compacted ({record.stage}): {record.tokens_before:,} → {record.tokens_after:,} tokens"
            await self.mount(NoticeBlock(text))
        elif isinstance(record, FinishEvent):
            await self._close_stream()
            if record.reason not in ("submitted",):
                await self.mount(NoticeBlock(f"stopped: {record.reason.replace('_', ' ')}", kind="warning"))
            elif record.summary.strip() and record.summary.strip() != self._last_answer.strip():
                await self.mount(NoticeBlock(f"✓ {record.summary.strip()}", kind="success"))

    async def _add_reasoning(self, text: str) -> None:
        self._streamed_in_step = True
        if self._reasoning is None:
            self._reasoning = ReasoningBlock()
            await self.mount(self._reasoning)
        self._reasoning.add(text)

    async def _add_answer(self, text: str) -> None:
        self._streamed_in_step = True
        if self._reasoning is not None:
            self._reasoning.close()
            self._reasoning = None
        if self._answer is None:
            self._answer = AnswerBlock()
            await self.mount(self._answer)
        self._answer.add(text)

    async def _message(self, message: dict) -> None:
        """An assistant message from a backend that did not stream shows up whole."""
        if message.get("role") != "assistant":
            return
        if not self._streamed_in_step:
            if message.get("reasoning_content"):
                await self._add_reasoning(message["reasoning_content"])
            if message.get("content"):
                await self._add_answer(message["content"])
        await self._close_stream()
        self._streamed_in_step = False

    async def _close_stream(self) -> None:
        if self._reasoning is not None:
            self._reasoning.close()
        if self._answer is not None:
            await self._answer.close()
            self._last_answer = self._answer.text
        self._reasoning = self._answer = None

    async def clear(self) -> None:
        await self._close_stream()
        self.tools.clear()
        await self.remove_children()
