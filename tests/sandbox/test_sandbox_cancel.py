"""Stopping a command is level-triggered: an interrupt or a cancel event that lands in the instant
before the command starts (or before its processes exist) still stops it.

The racy instant is hit exactly, not by timing: the shell's `send` is wrapped so that the stop
lands just before or just after the command line is written to the shell.
"""

from __future__ import annotations

import itertools
import threading

import pytest

from sandbox import LocalSandbox, Sandbox, SandboxConfig

_dirs = itertools.count(1)


@pytest.fixture(scope="module", params=["docker", "local"])
def any_sandbox(request):
    if request.param == "docker":
        request.getfixturevalue("base_image")
        sb = Sandbox.start(SandboxConfig())
    else:
        sb = LocalSandbox()
    with sb:
        # The folders the tests cd into live in the sandbox's workspace, which goes with it.
        assert sb.exec("export TEST_BASE=$(pwd -P)").exit_code == 0
        yield sb


def stop_when_the_command_is_sent(sb, monkeypatch, when: str, stop) -> list[bool]:
    """Call `stop()` just `when` ("before"/"after") the next command line goes to the shell;
    returns a list that holds True once it fired."""
    proc = sb._shell.shell
    original = proc.send
    fired: list[bool] = []

    def send(data: bytes) -> None:
        is_command = b"__hz_run;" in data and not fired
        if is_command and when == "before":
            fired.append(stop() is not False)
        original(data)
        if is_command and when == "after":
            fired.append(stop() is not False)

    monkeypatch.setattr(proc, "send", send)
    return fired


def wait_for_file(sb, path: str) -> None:
    for _ in range(3000):
        try:
            sb.read_file(path)
            return
        except Exception:  # not there yet
            threading.Event().wait(0.01)
    raise AssertionError(f"{path} never appeared")


def enter_fresh_state(sb) -> tuple[str, str]:
    """cd into a new folder and export a variable; (the folder's absolute path, value) to check
    afterwards."""
    name = f"cancel-{next(_dirs)}"
    r = sb.exec(f'mkdir "$TEST_BASE/{name}" && cd "$TEST_BASE/{name}" && export KEEP=v-{name} && pwd -P')
    assert r.exit_code == 0, r.output
    return r.output.strip(), f"v-{name}"


def assert_state_kept(sb, folder: str, value: str) -> None:
    after = sb.exec("pwd -P; echo $KEEP")
    assert after.exit_code == 0 and after.output.splitlines() == [folder, value], after.output


@pytest.mark.parametrize("when", ["before", "after"])
@pytest.mark.parametrize("how", ["interrupt", "cancel_event"])
def test_a_stop_racing_the_command_start_is_not_lost(any_sandbox, monkeypatch, when, how):
    sb = any_sandbox
    folder, value = enter_fresh_state(sb)
    cancel = threading.Event()
    stop = sb.interrupt if how == "interrupt" else cancel.set
    fired = stop_when_the_command_is_sent(sb, monkeypatch, when, stop)
    # If the stop were lost, this would run into its 60 s timeout and come back timed_out.
    r = sb.exec("sleep 300; echo never", timeout=60, cancel=cancel)
    monkeypatch.undo()
    assert fired == [True]  # interrupt() found the command in flight, even before it was sent
    assert r.interrupted and r.exit_code == 130 and not r.timed_out, r
    assert "never" not in r.output and "[interrupted" in r.output
    assert_state_kept(sb, folder, value)


def test_a_cancel_event_set_beforehand_does_not_run_the_command(any_sandbox):
    sb = any_sandbox
    folder, value = enter_fresh_state(sb)
    cancel = threading.Event()
    cancel.set()
    r = sb.exec("touch ran; sleep 300", timeout=60, cancel=cancel, stdin="ignored")
    assert r.interrupted and r.exit_code == 130 and not r.timed_out
    assert "not run" in r.output
    assert sb.exec("test -e ran; echo $?").output == "1\n"
    assert_state_kept(sb, folder, value)


def test_an_unset_cancel_event_changes_nothing(any_sandbox):
    r = any_sandbox.exec("echo hi; (exit 3)", cancel=threading.Event())
    assert r.output == "hi\n" and r.exit_code == 3 and not r.interrupted


def test_an_early_interrupt_spares_the_previous_commands_background_jobs(any_sandbox, monkeypatch):
    """A forked background subshell of the previous command lives in the shell's process group; a
    reap that ran before the next command announced its start would take it for that command's."""
    sb = any_sandbox
    started = sb.exec("(while true; do sleep 1; done) & echo $! > bg.pid")
    assert started.exit_code == 0, started.output
    stop_when_the_command_is_sent(sb, monkeypatch, "before", sb.interrupt)
    r = sb.exec("sleep 300", timeout=60)
    monkeypatch.undo()
    assert r.interrupted and not r.timed_out
    alive = sb.exec("kill -0 $(cat bg.pid) && echo alive; kill $(cat bg.pid)")
    assert alive.output.startswith("alive"), alive.output


def test_a_stop_after_the_processes_were_reaped_once_is_reaped_again(any_sandbox, monkeypatch):
    """The command's processes may not exist yet when the first reap runs: the shell is reaped
    again until the command is over. Here the command survives the first reap on purpose (it ignores
    USR1 and starts its sleep only after the reaper has looked), and is stopped by a later one."""
    sb = any_sandbox
    folder, value = enter_fresh_state(sb)
    shell = sb._shell
    original_reap = shell._reap
    reaps: list[str] = []

    def reap(token: str) -> None:
        if not reaps:  # let the first reap land only once the command ignores USR1
            wait_for_file(sb, f"{folder}/.ignoring")
        reaps.append(token)
        original_reap(token)
        if len(reaps) == 1:  # the command has passed the first reap: now let it go to sleep
            sb.exec_once(["bash", "-c", f"touch {gate}"], timeout=30)

    gate = f"{folder}/.gate"
    monkeypatch.setattr(shell, "_reap", reap)
    fired = stop_when_the_command_is_sent(sb, monkeypatch, "before", sb.interrupt)
    # Builtins only until the gate opens (a pipe read as the sleep), then one real process.
    r = sb.exec("trap '' USR1; > .ignoring; exec {w}<> <(:); until [ -e .gate ]; do read -t 0.05 -u $w; done; exec {w}>&-; "
                "sleep 300 && echo never", timeout=60)
    monkeypatch.undo()
    assert fired == [True] and len(reaps) >= 2 and len(set(reaps)) == 1, (reaps, r)
    assert r.interrupted and r.exit_code == 130 and not r.timed_out, r
    assert "never" not in r.output
    assert_state_kept(sb, folder, value)
