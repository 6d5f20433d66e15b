"""StdioProcess: a long-lived line-oriented process in a Docker sandbox (and in a LocalSandbox)."""

from __future__ import annotations

import pytest

from sandbox import LocalSandbox
from sandbox.stdio_process import StdioProcess, StdioProcessError


def _leftovers(sandbox, pattern: str) -> list[str]:
    listing = sandbox.exec_once(["ps", "-eo", "args="], timeout=30).output
    return [line for line in listing.splitlines() if pattern in line]


def test_lines_go_both_ways_with_env_and_workdir_in_the_container(shared_sandbox):
    script = 'echo "$GREETING from $(hostname) in $(pwd)"; echo to-stderr >&2; exec cat'
    with StdioProcess.start(shared_sandbox, ["sh", "-c", script], env={"GREETING": "hello there"}, workdir="/tmp") as proc:
        assert proc.where == f"container {shared_sandbox.container_id[:12]}"
        assert proc.read_line(timeout=30) == "hello there from sandbox in /tmp"
        long_line = "x" * 300_000 + " ünïcode"  # arrives in many chunks; comes back as one line
        proc.send_line(long_line)
        proc.send_line("second")
        assert proc.read_line(timeout=30) == long_line
        assert proc.read_line(timeout=30) == "second"
        with pytest.raises(TimeoutError):
            proc.read_line(timeout=0.2)
        assert proc.exit_code() is None and proc.stderr_tail() == "to-stderr\n"
        with pytest.raises(ValueError, match="newline"):
            proc.send_line("two\nlines")
    assert proc.exit_code() == 0  # cat saw stdin close and exited on its own
    assert proc.read_line(timeout=5) is None
    with pytest.raises(StdioProcessError, match="closed"):
        proc.send_line("late")


def test_a_process_that_exits_ends_its_output_with_its_code_and_stderr(shared_sandbox):
    proc = StdioProcess.start(shared_sandbox, ["sh", "-c", "echo last words; echo gone wrong >&2; exit 5"])
    try:
        assert proc.read_line(timeout=30) == "last words"
        assert proc.read_line(timeout=30) is None
        assert proc.exit_code() == 5
        assert proc.describe_exit() == " (exit code 5)\n--- stderr ---\ngone wrong"
    finally:
        proc.close()


def test_close_kills_a_process_that_ignores_eof_and_all_it_started(shared_sandbox):
    script = 'trap "" TERM; sleep 611 & setsid sleep 612 & echo ready; while :; do sleep 1; done'
    proc = StdioProcess.start(shared_sandbox, ["bash", "-c", script])
    assert proc.read_line(timeout=30) == "ready"
    assert {"sleep 611", "sleep 612"} < set(_leftovers(shared_sandbox, "sleep 61"))
    proc.close(grace_s=0.5)
    assert proc.exit_code() == 137
    assert _leftovers(shared_sandbox, "sleep 61") == []
    proc.close()  # idempotent


def test_a_runaway_line_ends_the_output_with_an_error_instead_of_filling_memory(shared_sandbox):
    script = "echo short; head -c 5000 /dev/zero | tr '\\0' x; sleep 30"
    with StdioProcess.start(shared_sandbox, ["sh", "-c", script], max_line_bytes=1000) as proc:
        assert proc.read_line(timeout=30) == "short"
        with pytest.raises(StdioProcessError, match="wrote a line longer than 1000 bytes"):
            proc.read_line(timeout=30)
    assert _leftovers(shared_sandbox, "sleep 30") == []


def test_a_local_sandbox_process_runs_on_the_host_in_its_workspace():
    with LocalSandbox() as local:
        with StdioProcess.start(local, ["sh", "-c", 'echo "$X $(pwd)"; exec cat'], env={"X": "local"}) as proc:
            assert proc.where == "the host (LocalSandbox: no isolation)"
            assert proc.read_line(timeout=30) == f"local {local.workdir}"
            proc.send_line("echo")
            assert proc.read_line(timeout=30) == "echo"
        assert proc.exit_code() == 0


def test_bad_arguments_fail_clearly(shared_sandbox):
    with pytest.raises(StdioProcessError, match="argv is empty"):
        StdioProcess.start(shared_sandbox, [])
    with pytest.raises(StdioProcessError, match=r"invalid environment variable names \['A=B'\]"):
        StdioProcess.start(shared_sandbox, ["cat"], env={"A=B": "1"})
    with pytest.raises(TypeError, match="expected a Sandbox or LocalSandbox, got str"):
        StdioProcess.start("not a sandbox", ["cat"])
