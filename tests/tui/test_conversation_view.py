"""The conversation view fed a streamed turn event by event, as a streaming backend produces it."""

from __future__ import annotations

import pytest
from textual.app import App, ComposeResult

from agent.events import ContentDelta, ErrorEvent, FinishEvent, ReasoningDelta, ToolCallEvent, ToolOutput
from agent.tui.widgets.blocks import AnswerBlock, ReasoningBlock
from agent.tui.widgets.conversation import ConversationView

pytestmark = pytest.mark.anyio


class ViewApp(App):
    def compose(self) -> ComposeResult:
        yield ConversationView()


async def test_streamed_deltas_build_one_reasoning_and_one_answer_block():
    app = ViewApp()
    answer = "Here is the plan:\n\n1. read `calc.py`\n2. fix **add**\n" * 5
    async with app.run_test(size=(80, 24)) as pilot:
        view = app.query_one(ConversationView)
        for word in "I should look at the add function first".split():
            await view.apply(ReasoningDelta(text=word + " "))
        reasoning = app.query_one(ReasoningBlock)
        assert not reasoning.collapsed  # open while the model thinks
        for i in range(0, len(answer), 3):
            await view.apply(ContentDelta(text=answer[i : i + 3]))
        assert reasoning.collapsed and reasoning.title == "Thought (8 words)"
        await view.apply(ToolCallEvent(call_id="t1", name="view", arguments={"path": "calc.py"}))
        await view.apply(ToolOutput(call_id="t1", name="view", output="1\tdef add(a, b):\n", is_error=False))
        await view.apply(ErrorEvent(kind="tool_error", message="hidden: the tool block shows it"))
        await view.apply(ErrorEvent(kind="format_error", message="no tool call"))
        await view.apply(FinishEvent(reason="step_limit", summary="reached the step limit (1)"))
        await pilot.pause(0.1)
        (block,) = app.query(AnswerBlock)
        assert block.text == answer and block.source == answer
        texts = [str(w.render()) for w in view.query(".notice")]
        assert texts == ["format_error: no tool call", "stopped: step limit"]
        assert view.tools["t1"].state == "ok"
