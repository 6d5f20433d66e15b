"""Trajectory files: flushed per event, rebuilt into a resumable state, robust to a torn last line."""

from __future__ import annotations

import pytest

from agent.config import AgentConfig, ConfigError, load_config
from agent.events import (
    Compacted, ContentDelta, ErrorEvent, FinishEvent, MessageAppended, ModelRequest, ReasoningDelta, RunStart,
    ToolCallEvent, ToolOutput, UsageEvent, WorkspaceCheckpoint, parse_event,
)
from agent.trajectory import TrajectoryError, TrajectoryWriter, load_trajectory
from inference.chat.messages import Message, ToolCall

ASSISTANT = Message.assistant(content="look", tool_calls=[ToolCall(id="c1", name="bash", arguments={"command": "ls"})])


def test_every_event_type_round_trips_through_json():
    events = [
        RunStart(task="t", model="replay:x", settings={"repo": "/r"}),
        ModelRequest(step=1, n_messages=2, estimated_context_tokens=10),
        ReasoningDelta(step=1, text="hmm"), ContentDelta(step=1, text="look"),
        ToolCallEvent(step=1, call_id="c1", name="bash", arguments={"command": "ls"}),
        ToolOutput(step=1, call_id="c1", name="bash", output="a\nb", exit_code=0, duration=0.1),
        UsageEvent(step=1, prompt_tokens=10, cached_tokens=4, completion_tokens=3, context_tokens=13),
        ErrorEvent(step=1, kind="format_error", message="bad"),
        MessageAppended(step=1, message=ASSISTANT.model_dump(exclude_none=True)),
        Compacted(step=2, stage="elide", tokens_before=10, tokens_after=5, messages=[]),
        WorkspaceCheckpoint(step=2, patch="diff --git a/x b/x\n"),
        FinishEvent(step=2, reason="submitted", summary="ok"),
    ]
    for event in events:
        assert parse_event(event.model_dump_json()) == event
        assert parse_event(event.model_dump()) == event


def test_writer_flushes_each_event_and_loader_rebuilds_the_state(tmp_path):
    path = tmp_path / "t.jsonl"
    writer = TrajectoryWriter(path)
    writer(RunStart(task="fix", model="replay:x"))
    for message in [Message.system("sys"), Message.user("fix"), ASSISTANT]:
        writer(MessageAppended(step=1, message=message.model_dump(exclude_none=True)))
    writer(UsageEvent(step=1, prompt_tokens=100, cached_tokens=0, completion_tokens=5, context_tokens=105))
    assert len(path.read_text().splitlines()) == 5  # readable while the writer is still open
    writer(WorkspaceCheckpoint(step=1, patch="P1"))
    with path.open("a") as f:
        f.write('{"type": "message", "step": 2, "mess')  # the process died mid-write
    state = load_trajectory(path)
    assert state.task == "fix" and state.usage.calls == 1 and state.checkpoint_patch == "P1"
    # The call whose result never arrived is answered, so the conversation is valid to continue.
    assert [m.role for m in state.messages] == ["system", "user", "assistant", "tool"]
    assert state.messages[-1].tool_call_id == "c1" and "not run" in state.messages[-1].content
    writer.close()


def test_compaction_replaces_the_conversation_on_load(tmp_path):
    path = tmp_path / "t.jsonl"
    with TrajectoryWriter(path) as writer:
        writer(RunStart(task="t", model="m"))
        for text in ["a", "b", "c"]:
            writer(MessageAppended(message=Message.user(text).model_dump()))
        writer(Compacted(stage="summarize", tokens_before=9, tokens_after=2,
                         messages=[Message.user("a").model_dump(), Message.user("summary").model_dump()]))
        writer(MessageAppended(message=Message.user("d").model_dump()))
    assert [m.content for m in load_trajectory(path).messages] == ["a", "summary", "d"]


def test_bad_trajectories_are_reported(tmp_path):
    with pytest.raises(TrajectoryError, match="does not exist"):
        load_trajectory(tmp_path / "missing.jsonl")
    (tmp_path / "x.jsonl").write_text('{"type": "finish", "reason": "submitted"}\n')
    with pytest.raises(TrajectoryError, match="no run_start"):
        load_trajectory(tmp_path / "x.jsonl")
    (tmp_path / "y.jsonl").write_text('garbage\n{"type": "finish", "reason": "submitted"}\n')
    with pytest.raises(TrajectoryError, match="y.jsonl:1"):
        load_trajectory(tmp_path / "y.jsonl")


def test_config_from_toml_with_overrides_and_named_errors(tmp_path):
    path = tmp_path / "h.toml"
    path.write_text('model = "openai:http://x"\nmax_steps = 7\n[context]\ncompact_trigger = 0.7\n'
                    '[mcp_servers.calc]\ncommand = ["python", "server.py"]\n')
    config = load_config(path, {"max_steps": 9, "context.keep_recent_turns": 3})
    assert (config.max_steps, config.context.compact_trigger, config.context.keep_recent_turns) == (9, 0.7, 3)
    assert config.mcp_servers["calc"].command == ["python", "server.py"]
    with pytest.raises(ConfigError, match=r"context: got \{\.\.\.\}; compact_target \(0.8\) must be below"):
        load_config(path, {"context.compact_target": 0.8})
    with pytest.raises(ConfigError, match="mcp_servers.calc.command: got \\[\\]"):
        load_config(path, {"mcp_servers.calc.command": []})
    with pytest.raises(ConfigError, match="is not valid TOML"):
        (tmp_path / "bad.toml").write_text("max_steps = = 3")
        load_config(tmp_path / "bad.toml")
    assert AgentConfig(reasoning_effort="medium").reasoning_effort == "medium"  # the engine has a medium budget
    assert AgentConfig(reasoning_effort="xhigh").reasoning_effort == "max"


def test_the_example_config_is_valid():
    from pathlib import Path

    config = load_config(Path(__file__).resolve().parents[2] / "examples" / "agent-config.toml")
    assert config.plugins == ["line_count"] and config.context.compact_target == 0.5
    assert config.sandbox.memory == "4g" and config.embedded.engine["kv_budget_tokens"] == 262144
