"""The persistent shell: state, exit codes, timeouts, output bounds and decoding."""

from __future__ import annotations

import resource
import threading
import time

import pytest

from sandbox import Sandbox, SandboxClosed, SandboxConfig


def test_state_persists_between_calls(shared_sandbox):
    sb = shared_sandbox
    assert sb.exec("cd /tmp && mkdir -p state && cd state && export HZ_X='a b' && f() { echo \"f:$1\"; }").exit_code == 0
    r = sb.exec('pwd; echo "$HZ_X"; f arg')
    assert r.output == "/tmp/state\na b\nf:arg\n"
    sb.exec("cd /workspace")


def test_exit_codes_and_stderr(shared_sandbox):
    assert shared_sandbox.exec("true").exit_code == 0
    assert shared_sandbox.exec("exit_with() { return $1; }; exit_with 7").exit_code == 7
    r = shared_sandbox.exec("echo out; echo err >&2; false")
    assert (r.exit_code, r.output, r.timed_out, r.truncated) == (1, "out\nerr\n", False, False)
    assert shared_sandbox.exec("no-such-command-xyz").exit_code == 127


def test_quoting_unicode_and_multiline_commands(shared_sandbox):
    r = shared_sandbox.exec("printf '%s|' \"it's\" 'a\\b' \"$((1+2))\" héllo\nfor i in 1 2; do\n  echo line$i\ndone")
    assert r.output == "it's|a\\b|3|héllo|line1\nline2\n"


def test_stdin_is_passed_and_otherwise_empty(shared_sandbox):
    assert shared_sandbox.exec("cat", stdin=b"in\x00put").output == "in\x00put"
    assert shared_sandbox.exec("cat; echo done", timeout=10).output == "done\n"  # reads /dev/null, no hang


def test_binary_and_invalid_utf8_output_is_decoded(shared_sandbox):
    r = shared_sandbox.exec("printf 'ok \\xff\\xfe\\x00 end'; head -c 3000 /dev/urandom")
    assert r.exit_code == 0 and r.output.startswith("ok \ufffd\ufffd\x00 end")


def test_timeout_kills_the_command_and_the_shell_survives(shared_sandbox):
    sb = shared_sandbox
    sb.exec("cd /tmp && export KEPT=yes")
    start = time.monotonic()
    r = sb.exec("sleep 1000; echo never", timeout=1.5)
    assert r.timed_out and r.exit_code == 124 and "never" not in r.output
    assert time.monotonic() - start < 30  # returned promptly, not after 1000 s
    assert "sleep 1000" not in sb.exec_once(["ps", "-eo", "args"]).output
    after = sb.exec("echo $KEPT; pwd")
    assert after.output == "yes\n/tmp\n" and not after.timed_out


def test_timeout_stops_shell_loops_and_whole_process_trees(shared_sandbox):
    sb = shared_sandbox
    assert sb.exec("while true; do :; done", timeout=1).timed_out
    r = sb.exec("for i in 1 2 3; do (sleep 300 & sleep 300; echo child-$i) ; done", timeout=1.5)
    assert r.timed_out and "child-1" not in r.output
    assert "sleep 300" not in sb.exec_once(["ps", "-eo", "args"]).output
    assert sb.exec("echo fine").output == "fine\n"


def test_timeout_kills_processes_that_left_the_group_and_cleared_their_environment(shared_sandbox):
    """setsid leaves the shell's process group, env -i drops the command's marker, and a double
    fork (daemonising) reparents the process to init: none of it escapes the timeout."""
    sb = shared_sandbox
    r = sb.exec("setsid env -i /bin/sleep 301 & setsid sh -c 'env -i /bin/sleep 302 &' ; sleep 303", timeout=1.5)
    assert r.timed_out
    procs = sb.exec_once(["ps", "-eo", "args"]).output
    assert not any(f"sleep {n}" in procs for n in (301, 302, 303)), procs
    assert sb.exec("echo fine").output == "fine\n"


def test_background_jobs_from_earlier_commands_survive_a_timeout(shared_sandbox):
    sb = shared_sandbox
    sb.exec("sleep 600 & echo $! > /tmp/bg.pid")
    assert sb.exec("sleep 100", timeout=1).timed_out
    assert sb.exec("kill -0 $(cat /tmp/bg.pid) && echo alive; kill $(cat /tmp/bg.pid)").output == "alive\n"


def _rss_mib() -> float:
    with open("/proc/self/statm") as fh:
        return int(fh.read().split()[1]) * resource.getpagesize() / 2**20


def test_huge_output_is_truncated_with_bounded_host_memory(shared_sandbox):
    baseline = _rss_mib()
    peak = [baseline]
    done = threading.Event()

    def sample():  # current RSS while the command floods its output
        while not done.is_set():
            peak[0] = max(peak[0], _rss_mib())
            time.sleep(0.02)

    sampler = threading.Thread(target=sample)
    sampler.start()
    try:
        r = shared_sandbox.exec("head -c 200000000 /dev/zero | tr '\\0' x; echo; echo THE-END",
                                output_limit=10_000, timeout=120)
    finally:
        done.set()
        sampler.join()
    assert r.exit_code == 0 and r.truncated and r.output_bytes == 200_000_009
    assert r.output.startswith("x" * 5000) and r.output.endswith("THE-END\n")
    assert "bytes cut: the output was 200000009 bytes" in r.output
    assert len(r.output) < 11_000
    assert peak[0] - baseline < 50, f"host RSS grew by {peak[0] - baseline:.0f} MiB for 200 MB of output"


def test_exit_in_the_shell_starts_a_fresh_one(sandbox):
    r = sandbox.exec("exit 3")
    assert r.exit_code == 3 and "new shell" in r.output
    assert sandbox.exec("pwd").output == "/workspace\n"
    died = sandbox.exec("set -u; echo before; echo $NOT_SET_ANYWHERE")
    assert died.exit_code == 1 and died.output.startswith("before\nbash: NOT_SET_ANYWHERE: unbound variable\n")
    assert sandbox.exec("cd /nonexistent").output == "bash: cd: /nonexistent: No such file or directory\n"


def test_exec_once_runs_a_separate_process(shared_sandbox):
    shared_sandbox.exec("cd /tmp")
    r = shared_sandbox.exec_once(["sh", "-c", "pwd; echo $$"])
    assert r.exit_code == 0 and r.output.splitlines()[0] == "/workspace"
    t = shared_sandbox.exec_once(["sleep", "100"], timeout=1)
    assert t.timed_out and t.exit_code == 124
    assert shared_sandbox.exec_once("exit 5").exit_code == 5


def test_unprivileged_user(base_image):
    with Sandbox.start(SandboxConfig(user="horizon")) as sb:
        assert sb.exec("id -un; touch /workspace/mine && echo ok").output == "horizon\nok\n"
        sb.write_file("/workspace/written.txt", "x")
        assert sb.exec("stat -c %U /workspace/written.txt").output == "horizon\n"
        assert sb.exec("sleep 50", timeout=1).timed_out
        assert sb.exec("echo back").output == "back\n"


def test_long_commands_travel_intact(shared_sandbox):
    body = "".join(f"line {i} with 'quotes', \"double\", $HOME and \\ backslash\n" for i in range(5000))
    r = shared_sandbox.exec(f"cat > /tmp/long.txt <<'EOF'\n{body}EOF\nexport LONG_SET=1; wc -c < /tmp/long.txt")
    assert r.exit_code == 0 and int(r.output) == len(body.encode())
    assert shared_sandbox.read_file("/tmp/long.txt").decode() == body
    assert shared_sandbox.exec("echo $LONG_SET").output == "1\n"  # ran in the persistent shell


def test_exec_once_merges_stderr_in_order_and_closes_stdin(shared_sandbox):
    r = shared_sandbox.exec_once(["bash", "-c", "echo one; sleep 0.2; echo two >&2; sleep 0.2; echo three; cat"], timeout=30)
    assert r.output == "one\ntwo\nthree\n" and r.exit_code == 0


def test_close_from_another_thread_interrupts_a_running_command(base_image, docker_client):
    sb = Sandbox.start(SandboxConfig())
    closer = threading.Timer(1.0, sb.close)
    closer.start()
    start = time.monotonic()
    with pytest.raises(SandboxClosed, match="closed while the command ran"):
        sb.exec("sleep 100", timeout=60)
    assert time.monotonic() - start < 30
    closer.join()
    assert not docker_client.containers.list(sparse=True, all=True, filters={"id": sb.container_id})


def test_a_shell_that_ignores_the_abort_is_replaced(sandbox):
    sandbox.exec("cd /tmp")
    r = sandbox.exec("trap '' USR1; while true; do :; done", timeout=1)
    assert r.timed_out and "was replaced" in r.output
    assert sandbox.exec("pwd; echo ok").output == "/workspace\nok\n"


@pytest.mark.parametrize("kind", ["docker", "local"])
def test_interrupt_stops_the_running_command_and_keeps_the_shell(base_image, kind):
    from sandbox import LocalSandbox

    sb = Sandbox.start(SandboxConfig()) if kind == "docker" else LocalSandbox()
    with sb:
        assert sb.interrupt() is False  # nothing running
        sb.exec("cd /tmp; export KEEP=1; sleep 600 & echo started")  # the background job must survive
        threading.Timer(1.0, sb.interrupt).start()
        start = time.monotonic()
        r = sb.exec("for i in 1 2 3; do sleep 100; done; echo never", timeout=60)
        assert r.interrupted and r.exit_code == 130 and not r.timed_out and "never" not in r.output
        assert time.monotonic() - start < 30
        assert sb.exec("echo $KEEP; jobs -p | wc -l").output == "1\n1\n"
