"""The agent loop with the replay backend and the built-in tools in a real sandbox."""

from __future__ import annotations

import threading

import pytest

from agent.backends.replay import ReplayBackend
from agent.config import AgentConfig
from agent.events import ErrorEvent, FinishEvent, ToolCallEvent, ToolOutput, parse_event
from agent.loop import Agent, Approval
from agent_testkit import call, write_replay


def run_script(tmp_path, tools, steps, config=None, **agent_kwargs):
    events = []
    backend = ReplayBackend(write_replay(tmp_path / "script.jsonl", steps))
    agent = Agent(config or AgentConfig(), backend, tools, on_event=events.append, **agent_kwargs)
    result = agent.run("the task")
    return agent, result, events


def finish(summary="done"):
    return {"tool_calls": [call("finish", summary=summary)]}


def tool_messages(result):
    return [m for m in result.messages if m.role == "tool"]


def test_format_error_is_shown_to_the_model_and_the_run_recovers(tmp_path, tools):
    # Raw GLM text through the real parser: the tool call is never closed.
    steps = [
        {"raw": "Let me list.<tool_call>bash<arg_key>command</arg_key><arg_value>ls"},
        {"raw": "Again.<tool_call>bash<arg_key>command</arg_key><arg_value>echo recovered</arg_value></tool_call>"},
        finish(),
    ]
    _, result, events = run_script(tmp_path, tools, steps)
    assert result.reason == "submitted" and result.steps == 3
    feedback = result.messages[3]
    assert feedback.role == "user" and feedback.content.startswith("Format error") and "tool_call" in feedback.content
    assert any(isinstance(e, ErrorEvent) and e.kind == "format_error" for e in events)
    assert "recovered" in tool_messages(result)[0].content


def test_repeated_format_errors_end_the_run(tmp_path, tools):
    bad = {"content": "???", "format_errors": ["no tool call could be parsed"]}
    _, result, _ = run_script(tmp_path, tools, [bad] * 4, AgentConfig(max_format_errors=2))
    assert result.reason == "error" and "3 consecutive format errors" in result.summary


def test_reply_without_tool_call_needs_finish_when_headless(tmp_path, tools):
    steps = [{"content": "I think I am done."}, finish("ok")]
    _, result, _ = run_script(tmp_path, tools, steps)
    assert result.reason == "submitted" and result.summary == "ok"
    assert "call `finish`" in result.messages[3].content
    # In chat mode a plain answer ends the turn instead.
    _, chat, _ = run_script(tmp_path, tools, [{"content": "Hello!"}], AgentConfig(require_finish_tool=False))
    assert chat.reason == "submitted" and chat.summary == "Hello!" and chat.steps == 1


def test_validation_error_and_unknown_tool_go_back_and_the_run_continues(tmp_path, tools):
    steps = [
        {"tool_calls": [call("str_replace", path="x.py"), call("summon_demon", power=9000)]},
        finish(),
    ]
    _, result, events = run_script(tmp_path, tools, steps)
    assert result.reason == "submitted"
    invalid, unknown = tool_messages(result)[:2]
    assert "old_str: required argument is missing" in invalid.content
    assert "unknown tool 'summon_demon'" in unknown.content
    outputs = [e for e in events if isinstance(e, ToolOutput)]
    assert [o.is_error for o in outputs] == [True, True, False]


def test_tool_timeout_is_reported_and_the_next_call_works(tmp_path, tools):
    steps = [
        {"tool_calls": [call("bash", command="sleep 60", timeout=1)]},
        {"tool_calls": [call("bash", command="echo next")]},
        finish(),
    ]
    _, result, _ = run_script(tmp_path, tools, steps)
    timed_out, after = tool_messages(result)[:2]
    assert "timed out after 1s" in timed_out.content
    assert "next" in after.content and result.reason == "submitted"


def test_parallel_tool_calls_run_in_order(tmp_path, tools):
    steps = [
        {"tool_calls": [
            call("create", "c1", path="notes.txt", file_text="alpha\n"),
            call("str_replace", "c2", path="notes.txt", old_str="alpha", new_str="beta"),
            call("bash", "c3", command="cat notes.txt"),
        ]},
        finish(),
    ]
    _, result, _ = run_script(tmp_path, tools, steps)
    results = tool_messages(result)
    assert [m.tool_call_id for m in results[:3]] == ["c1", "c2", "c3"]
    assert results[2].content.startswith("beta")


@pytest.mark.parametrize(
    ("config", "reason"),
    [
        (AgentConfig(max_steps=2), "step_limit"),
        (AgentConfig(token_budget=50), "token_budget"),
        (AgentConfig(time_limit_s=0.5), "time_limit"),
    ],
)
def test_limits_stop_the_run(tmp_path, tools, config, reason):
    steps = [{"tool_calls": [call("bash", command="sleep 0.6; echo step")]} for _ in range(4)] + [finish()]
    _, result, events = run_script(tmp_path, tools, steps, config)
    assert result.reason == reason
    assert isinstance(events[-1], FinishEvent) and events[-1].reason == reason
    assert result.steps < 5


def test_interrupt_stops_a_running_tool_and_keeps_the_conversation_valid(tmp_path, tools):
    steps = [{"tool_calls": [call("bash", "long", command="sleep 30", timeout=4), call("bash", "after", command="echo x")]},
             finish()]
    holder = {}

    def on_event(event):
        if isinstance(event, ToolCallEvent) and event.call_id == "long":
            threading.Timer(0.5, holder["agent"].interrupt).start()

    backend = ReplayBackend(write_replay(tmp_path / "script.jsonl", steps))
    agent = holder["agent"] = Agent(AgentConfig(), backend, tools, on_event=on_event)
    result = agent.run("the task")
    assert result.reason == "interrupted"
    long, after = tool_messages(result)
    assert long.tool_call_id == "long" and "interrupted by the user" in long.content
    assert after.tool_call_id == "after" and "not run" in after.content


@pytest.mark.timeout(120)  # without the sandbox interrupt the next bash call would wait for `sleep 300`
def test_interrupt_stops_a_command_in_the_sandbox_and_the_shell_takes_the_next_call(tmp_path, tools, sandbox, workdir):
    from agent_testkit import wait_for_file

    marker = f"{workdir}/.started"
    steps = [{"tool_calls": [call("bash", "long", command=f"cd sub && touch {marker} && sleep 300", timeout=1000)]},
             finish()]
    sandbox.exec_once(["mkdir", "-p", f"{workdir}/sub"])
    agent = Agent(AgentConfig(), ReplayBackend(write_replay(tmp_path / "script.jsonl", steps)), tools)
    watcher = threading.Thread(target=lambda: (wait_for_file(sandbox, marker), agent.interrupt()))
    watcher.start()
    result = agent.run("the task")
    watcher.join()
    assert result.reason == "interrupted"
    after = tools.call("bash", {"command": "echo alive; pwd"})  # the same shell, its cwd kept
    assert after.exit_code == 0 and after.output.splitlines()[:2] == ["alive", f"{workdir}/sub"]


def test_denied_tool_call_goes_back_as_its_result(tmp_path, tools, sandbox, workdir):
    def approver(event: ToolCallEvent) -> Approval:
        return Approval.deny("no writes today") if event.name == "create" else Approval.approve()

    steps = [{"tool_calls": [call("create", path="blocked.txt", file_text="x")]}, finish()]
    _, result, _ = run_script(tmp_path, tools, steps, approver=approver)
    assert tool_messages(result)[0].content == "denied: no writes today"
    assert sandbox.exec_once(["test", "-e", f"{workdir}/blocked.txt"], timeout=10).exit_code == 1


def test_calls_after_finish_are_not_run_and_events_round_trip(tmp_path, tools):
    steps = [{"tool_calls": [call("finish", summary="early"), call("bash", command="touch late")]}]
    _, result, events = run_script(tmp_path, tools, steps)
    assert result.reason == "submitted" and result.summary == "early"
    assert "not run" in tool_messages(result)[1].content
    for event in events:
        assert parse_event(event.model_dump_json()) == event


def test_a_restored_agent_continues_the_conversation(tmp_path, tools):
    steps = [{"tool_calls": [call("bash", command="echo one")]},
             {"tool_calls": [call("bash", command="echo two")]},
             finish("resumed fine")]
    script = write_replay(tmp_path / "script.jsonl", steps)
    first = Agent(AgentConfig(max_steps=1), ReplayBackend(script), tools).run("the task")
    assert first.reason == "step_limit"
    backend = ReplayBackend(script)
    backend.skip(first.steps)
    second = Agent(AgentConfig(max_steps=5), backend, tools, messages=first.messages, steps_done=first.steps,
                   usage=first.usage).run()
    assert second.reason == "submitted" and second.summary == "resumed fine" and second.steps == 3
    assert second.messages[: len(first.messages)] == first.messages


def test_a_tool_cannot_outlive_the_time_limit(tmp_path, tools):
    steps = [{"tool_calls": [call("bash", command="sleep 30", timeout=4)]}, finish()]
    _, result, _ = run_script(tmp_path, tools, steps, AgentConfig(time_limit_s=1))
    assert result.reason == "time_limit"
    assert tool_messages(result)[0].content == "stopped: the run's time limit was reached"
