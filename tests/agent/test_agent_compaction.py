"""Long horizons: compaction keeps a stable prefix and breaks the prompt cache rarely (300 turns)."""

from __future__ import annotations

from pydantic import BaseModel

from agent.backends.replay import ReplayBackend
from agent.config import AgentConfig, ContextConfig
from agent.context import ELIDED_PREFIX, SUMMARY_HEADER
from agent.events import Compacted, ErrorEvent, UsageEvent
from agent.loop import Agent
from agent.tools import ToolContext, ToolSet, function_tool
from agent_testkit import call, write_replay

TURNS = 300


class ReadLogArgs(BaseModel):
    n: int


@function_tool(read_only=True)
def read_log(args: ReadLogArgs, ctx: ToolContext) -> str:
    """Read one chunk of a long log (a stand-in for any tool with a large observation)."""
    return "\n".join(f"log {args.n} line {i}: " + "x" * 40 for i in range(40))


def scripted_run(tmp_path, config: ContextConfig, summaries: int):
    steps = [{"content": f"reading chunk {n}", "tool_calls": [call("read_log", n=n)]} for n in range(TURNS)]
    steps.append({"tool_calls": [call("finish", summary="read everything")]})
    steps += [{"purpose": "summary", "content": f"Summary {k}: read log chunks in order; nothing unusual yet."}
              for k in range(summaries)]
    backend = ReplayBackend(write_replay(tmp_path / "long.jsonl", steps))
    from agent.tools.builtins import FinishTool

    ctx = ToolContext(sandbox=None)
    tools = ToolSet([read_log(ctx), FinishTool(ctx)])
    events = []
    agent = Agent(AgentConfig(max_steps=TURNS + 5, context=config), backend, tools, on_event=events.append)
    return agent.run("Read the whole log and report anomalies."), backend, events


def prefix_breaks(events) -> list[int]:
    """Steps whose prompt is not a cached extension of the previous prompt plus reply."""
    usages = [e for e in events if isinstance(e, UsageEvent) and e.purpose == "step"]
    return [cur.step for prev, cur in zip(usages, usages[1:]) if cur.cached_tokens < prev.context_tokens]


def test_300_turns_compact_rarely_and_keep_the_stable_prefix(tmp_path):
    config = ContextConfig(context_window=40_000, compact_trigger=0.8, compact_target=0.5,
                           keep_first_turns=2, keep_recent_turns=8)
    result, backend, events = scripted_run(tmp_path, config, summaries=5)
    assert result.reason == "submitted" and result.steps == TURNS + 1

    compactions = [e for e in events if isinstance(e, Compacted)]
    breaks = prefix_breaks(events)
    gaps = [b - a for a, b in zip(breaks, breaks[1:])]
    print(f"compactions={len(compactions)} breaks={breaks} gaps={gaps} "
          f"cache_hit={result.usage.cached_tokens / result.usage.prompt_tokens:.3f}")
    assert 3 <= len(compactions) <= TURNS // 20
    assert len(breaks) == len(compactions)  # the cache breaks only where compaction happened
    assert min(gaps) >= 15  # large steps: many turns between breaks
    assert {c.stage for c in compactions} == {"elide", "summarize"}
    assert result.usage.cached_tokens / result.usage.prompt_tokens > 0.9

    # Every prompt starts with the same stable prefix: system, task, and the first two turns verbatim.
    first = backend.prompts[5][:6]
    assert [m.role for m in first] == ["system", "user", "assistant", "tool", "assistant", "tool"]
    assert all(prompt[:6] == first for prompt in backend.prompts[5:])
    # No prompt ever exceeded the window; old observations are elided or summarized, recent ones are whole.
    assert max(e.context_tokens for e in events if isinstance(e, UsageEvent)) <= config.context_window
    final = backend.prompts[-1]
    assert any((m.content or "").startswith(SUMMARY_HEADER) for m in final)
    assert all(not (m.content or "").startswith(ELIDED_PREFIX) for m in final[-16:] if m.role == "tool")


def test_summary_falls_back_to_an_action_list_when_the_model_cannot_summarize(tmp_path):
    config = ContextConfig(context_window=12_000, compact_trigger=0.8, compact_target=0.3,
                           keep_first_turns=1, keep_recent_turns=4)
    result, backend, events = scripted_run(tmp_path, config, summaries=0)
    assert result.reason == "submitted"
    assert any(isinstance(e, ErrorEvent) and e.kind == "compaction_error" for e in events)
    summaries = [m.content for m in backend.prompts[-1] if (m.content or "").startswith(SUMMARY_HEADER)]
    assert summaries and "read_log" in summaries[0] and '"n": 2' in summaries[0]


def test_a_prompt_the_model_rejects_as_too_long_is_compacted_and_retried(tmp_path):
    # The configured window is too generous; the model's real one (3000 tokens) rejects the prompt.
    steps = [{"tool_calls": [call("read_log", n=n)]} for n in range(12)] + [{"tool_calls": [call("finish", summary="ok")]}]
    backend = ReplayBackend(write_replay(tmp_path / "s.jsonl", steps), context_window=3000)
    from agent.tools.builtins import FinishTool

    ctx = ToolContext(sandbox=None)
    events = []
    config = AgentConfig(context=ContextConfig(context_window=100_000, keep_first_turns=1, keep_recent_turns=2,
                                               summarize=False))
    result = Agent(config, backend, ToolSet([read_log(ctx), FinishTool(ctx)]), on_event=events.append).run("read")
    assert result.reason == "submitted"
    assert [e.kind for e in events if isinstance(e, ErrorEvent)].count("context_overflow") >= 1
    assert any(isinstance(e, Compacted) and e.stage == "elide" for e in events)


def test_repeating_the_same_call_gets_a_nudge(tmp_path):
    steps = [{"tool_calls": [call("read_log", n=1)]} for _ in range(3)] + [{"tool_calls": [call("finish", summary="ok")]}]
    from agent.tools.builtins import FinishTool

    ctx = ToolContext(sandbox=None)
    backend = ReplayBackend(write_replay(tmp_path / "s.jsonl", steps))
    result = Agent(AgentConfig(), backend, ToolSet([read_log(ctx), FinishTool(ctx)])).run("read")
    outputs = [m.content for m in result.messages if m.role == "tool"]
    assert "Try a different approach" not in outputs[1] and "Try a different approach" in outputs[2]
