"""A compaction's summary request is a model call like any other: its tokens are in the run's totals,
in a usage event (tagged `purpose="compaction"`), in the trajectory and under `token_budget`.

The replay backend accounts 4 characters per token of the rendered request and reply, so every
number below is exact and deterministic."""

from __future__ import annotations

import io
import json

from pydantic import BaseModel

from agent.backends.replay import ReplayBackend
from agent.cli.progress import JsonEventPrinter
from agent.config import AgentConfig, ContextConfig
from agent.events import Compacted, RunStart, UsageEvent
from agent.loop import Agent
from agent.tools import ToolContext, ToolSet, function_tool
from agent.tools.builtins import FinishTool
from agent.trajectory import TrajectoryWriter, load_trajectory
from agent_testkit import call, write_replay
from inference.chat.messages import Message

SUMMARY = "Chunks 1-4 read; every line is x-padding, nothing unusual."


class ChunkArgs(BaseModel):
    n: int


@function_tool(read_only=True)
def read_log(args: ChunkArgs, ctx: ToolContext) -> str:
    """Read one chunk of a long log."""
    return "\n".join(f"log {args.n} line {i}: " + "x" * 40 for i in range(40))


def run(tmp_path, token_budget: int | None = None):
    steps = [{"content": f"reading chunk {n}", "tool_calls": [call("read_log", call_id=f"c{n}", n=n)]} for n in range(8)]
    steps.append({"tool_calls": [call("finish", call_id="fin", summary="done")]})
    steps.append({"purpose": "summary", "content": SUMMARY})
    # A 5000-token window fills after six chunks; eliding alone cannot reach a 20% target, so the
    # model is asked for a summary exactly once.
    context = ContextConfig(context_window=5000, compact_trigger=0.8, compact_target=0.2,
                            keep_first_turns=1, keep_recent_turns=2)
    config = AgentConfig(max_steps=20, context=context, token_budget=token_budget)
    backend = ReplayBackend(write_replay(tmp_path / "script.jsonl", steps))
    ctx = ToolContext(sandbox=None)
    events, json_lines = [], io.StringIO()
    printer = JsonEventPrinter(json_lines)
    with TrajectoryWriter(tmp_path / "trajectory.jsonl") as trajectory:
        trajectory(RunStart(task="read the log", model="replay", settings=config.model_dump()))

        def on_event(event):
            events.append(event)
            trajectory(event)
            printer(event)

        agent = Agent(config, backend, ToolSet([read_log(ctx), FinishTool(ctx)]), on_event=on_event)
        result = agent.run("read the log")
    return result, events, json_lines.getvalue()


def test_the_summary_request_is_a_usage_event_and_counts_in_the_totals(tmp_path):
    result, events, json_out = run(tmp_path)
    assert result.reason == "submitted" and result.steps == 9

    usages = [e for e in events if isinstance(e, UsageEvent)]
    summary_usage = [e for e in usages if e.purpose == "compaction"]
    compacted = [e for e in events if isinstance(e, Compacted)]
    assert [c.stage for c in compacted] == ["summarize"]
    assert len(summary_usage) == 1
    u = summary_usage[0]
    # The request is the summary instructions plus the transcript of turns 2-4: 1873 tokens, nothing
    # cached (it shares no prefix with the agent's prompts); the reply is the summary line.
    reply_chars = len(json.dumps(Message(role="assistant", content=SUMMARY).model_dump(exclude_none=True),
                                 ensure_ascii=False, sort_keys=True))
    assert (u.prompt_tokens, u.cached_tokens, u.completion_tokens) == (1873, 0, 24)
    assert u.completion_tokens == (reply_chars + 3) // 4
    # It belongs to step 6, comes just before the Compacted event, and reports the compacted size.
    assert u.step == 6 and events.index(u) == events.index(compacted[0]) - 1
    assert u.context_tokens == compacted[0].tokens_after == 2152

    steps = [e for e in usages if e.purpose == "step"]
    assert len(steps) == 9 and [e.step for e in steps] == list(range(1, 10))
    assert sum(e.prompt_tokens for e in steps) == 21394 - 1873
    assert sum(e.completion_tokens for e in steps) == 298 - 24
    totals = result.usage
    assert (totals.calls, totals.compaction_calls) == (9, 1)
    assert (totals.prompt_tokens, totals.cached_tokens, totals.completion_tokens) == (21394, 13841, 298)

    # The trajectory adds up to the same totals (resume starts from them), still 9 steps to replay.
    state = load_trajectory(tmp_path / "trajectory.jsonl")
    assert state.usage == totals and state.steps == 9
    # `--json` consumers see the tagged event.
    lines = [json.loads(line) for line in json_out.splitlines()]
    tagged = [line for line in lines if line["type"] == "usage" and line["purpose"] == "compaction"]
    assert len(tagged) == 1 and tagged[0]["prompt_tokens"] == 1873 and tagged[0]["completion_tokens"] == 24


def test_the_summary_tokens_count_against_the_token_budget(tmp_path):
    # Steps 1-7 cost 13497 tokens, the summary 1897 more: 15394 in all. A budget of 14000 is spent
    # after step 7 only when the summary counts; without it, step 8 would run.
    result, events, _ = run(tmp_path, token_budget=14_000)
    assert result.reason == "token_budget"
    assert result.steps == 7
    assert result.summary == "used 15394 of 14000 tokens"
    assert result.usage.total_tokens == 15394
    step_tokens = sum(e.prompt_tokens + e.completion_tokens for e in events
                      if isinstance(e, UsageEvent) and e.purpose == "step")
    assert step_tokens == 13497 < 14_000
