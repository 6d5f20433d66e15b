"""Replay scripts resume where the earlier run stopped, for steps and summary answers alike."""

from __future__ import annotations

import json

from agent.backends.replay import ReplayBackend
from inference.chat.messages import Message, ToolSpec

TOOLS = [ToolSpec(name="bash", description="run", parameters={"type": "object", "properties": {}})]


def test_skip_counts_steps_and_summaries_separately(tmp_path):
    script = tmp_path / "r.jsonl"
    lines = [{"content": "step 1"}, {"purpose": "summary", "content": "summary 1"}, {"content": "step 2"},
             {"purpose": "summary", "content": "summary 2"}, {"content": "step 3"}]
    script.write_text("".join(json.dumps(line) + "\n" for line in lines))
    backend = ReplayBackend(script)
    backend.skip(2, 1)  # an earlier run took two steps and compacted once
    ask = [Message.user("go")]
    assert backend.complete(ask, TOOLS).message.content == "step 3"
    assert backend.complete(ask, []).message.content == "summary 2"  # not summary 1 again
