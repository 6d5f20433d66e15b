"""Interrupts reach a bash command through the ToolSet however early they come.

The racy instant (the interrupt lands just before or just after the command line is written to the
sandbox's shell) is hit exactly by wrapping the shell's `send`.
"""

from __future__ import annotations

import threading

import pytest
from agent_testkit import call, write_replay
from pydantic import BaseModel

from agent.backends.replay import ReplayBackend
from agent.config import AgentConfig
from agent.loop import Agent
from agent.tools import Tool, ToolSet


def on_command_sent(sandbox, monkeypatch, when: str, action) -> list[int]:
    """Run `action()` just `when` ("before"/"after") the next command line goes to the shell."""
    proc = sandbox._shell.shell
    original = proc.send
    fired: list[int] = []

    def send(data: bytes) -> None:
        is_command = b"__hz_run;" in data and not fired
        if is_command and when == "before":
            fired.append(1)
            action()
        original(data)
        if is_command and when == "after":
            fired.append(1)
            action()

    monkeypatch.setattr(proc, "send", send)
    return fired


@pytest.mark.parametrize("when", ["before", "after"])
def test_an_interrupt_racing_the_bash_start_stops_the_command(tools, sandbox, workdir, monkeypatch, when):
    tools.call("bash", {"command": "export KEPT=yes"})
    interrupt = threading.Event()
    # What Agent.interrupt does, and then the caller reuses its event (Agent.run clears it): the
    # call's own stop event must keep the command stopped.
    fired = on_command_sent(sandbox, monkeypatch, when, lambda: (interrupt.set(), tools.cancel(), interrupt.clear()))
    # If the interrupt were lost this would run into its 60 s timeout and say so.
    stopped = tools.call("bash", {"command": "sleep 300; echo never", "timeout": 60}, cancel=interrupt)
    monkeypatch.undo()
    assert fired == [1]
    assert stopped.exit_code == 130 and "interrupted by the user" in stopped.output, stopped.output
    assert "never" not in stopped.output and "timed out" not in stopped.output
    after = tools.call("bash", {"command": "echo $KEPT; pwd"})
    assert after.exit_code == 0 and after.output.splitlines()[:2] == ["yes", workdir]


@pytest.mark.timeout(120)  # a lost interrupt leaves `sleep 300` holding the shell for the next call
def test_agent_interrupt_in_the_instant_before_bash_starts_frees_the_shell(tmp_path, tools, sandbox, workdir,
                                                                          monkeypatch):
    steps = [{"tool_calls": [call("bash", "long", command="sleep 300", timeout=1000)]},
             {"tool_calls": [call("finish", summary="not reached")]}]
    agent = Agent(AgentConfig(), ReplayBackend(write_replay(tmp_path / "script.jsonl", steps)), tools)
    fired = on_command_sent(sandbox, monkeypatch, "before", agent.interrupt)
    result = agent.run("the task")
    assert result.reason == "interrupted" and fired == [1]
    after = tools.call("bash", {"command": "echo alive; pwd"})
    monkeypatch.undo()
    assert after.exit_code == 0 and after.output.splitlines()[:2] == ["alive", workdir]


class _WaitArgs(BaseModel):
    seconds: float = 60


class _WaitsForCancel(Tool):
    """Wait until cancelled (a plugin tool that can stop early)."""

    name = "wait_for_cancel"
    Args = _WaitArgs
    manages_timeout = True

    def __init__(self, ctx):
        super().__init__(ctx)
        self.started = threading.Event()

    def run_cancellable(self, args: _WaitArgs, cancel: threading.Event) -> str:
        self.started.set()
        return "stopped early" if cancel.wait(args.seconds) else "waited in full"


class _PlainTool(Tool):
    """A tool written before run_cancellable existed."""

    name = "plain"
    Args = _WaitArgs

    def run(self, args: _WaitArgs) -> str:
        return f"plain {args.seconds:g}"


def test_plugin_tools_get_a_cancel_event_and_old_style_tools_still_work(ctx):
    waiter = _WaitsForCancel(ctx)
    tools = ToolSet([waiter, _PlainTool(ctx)])
    assert tools.call("plain", {"seconds": 2}).output == "plain 2"
    box = {}
    worker = threading.Thread(target=lambda: box.update(result=tools.call("wait_for_cancel", {})))
    worker.start()
    assert waiter.started.wait(60)
    tools.cancel()
    worker.join()
    assert box["result"].output == "stopped early"
    interrupt = threading.Event()
    interrupt.set()  # set before the call: the tool is not run at all
    assert "interrupted by the user" in tools.call("wait_for_cancel", {}, cancel=interrupt).output
