"""LocalSandbox: the same API on the host (no isolation)."""

from __future__ import annotations

import time

import pytest

from sandbox import LocalSandbox, SandboxError


def test_local_sandbox_same_api(tmp_path):
    with LocalSandbox(env={"GIVEN": "yes"}) as sb:
        assert sb.exec("cd sub 2>/dev/null || mkdir sub && cd sub; export Y=2").exit_code == 0
        r = sb.exec('basename "$PWD"; echo $Y $GIVEN')
        assert r.output == "sub\n2 yes\n"
        assert sb.exec("exit 4").exit_code == 4
        assert sb.exec("echo alive").output == "alive\n"

        start = time.monotonic()
        t = sb.exec("sleep 1000", timeout=1)
        assert t.timed_out and time.monotonic() - start < 30
        assert sb.exec("echo after").output == "after\n"

        big = sb.exec("head -c 5000000 /dev/zero | tr '\\0' y", output_limit=1000)
        assert big.truncated and big.output_bytes == 5_000_000 and len(big.output) < 1200

        sb.write_file("/workspace/a b/ü.bin", b"\x00\xff")
        assert sb.read_file("a b/ü.bin") == b"\x00\xff"
        assert sb.exec("cat '/workspace/a b/ü.bin' 2>/dev/null || cat 'a b/ü.bin' | wc -c").exit_code == 0
        (tmp_path / "dir").mkdir()
        (tmp_path / "dir" / "f.txt").write_text("f")
        sb.copy_in(tmp_path / "dir", "/workspace")
        assert sb.exec("cat dir/f.txt 2>/dev/null || cat ../dir/f.txt").exit_code == 0
        out = sb.copy_out("/workspace/dir", tmp_path / "back")
        assert (out / "f.txt").read_text() == "f"
        assert sb.exec_once(["echo", "once"]).output == "once\n"
        assert sb.exec_once(["sleep", "100"], timeout=1).timed_out
        with pytest.raises(SandboxError):
            sb.read_file("/workspace/missing")
        root = sb.root
    assert not root.exists()


def test_local_timeout_kills_a_child_that_left_the_group_but_not_strangers(tmp_path):
    """On the host the shell's own children are the command's even after setsid + env -i; a
    unrelated process (here: one this test starts in its own session) is left alone."""
    import subprocess

    with LocalSandbox() as sb:
        stranger = subprocess.Popen(["sleep", "304"], start_new_session=True)
        try:
            r = sb.exec("setsid env -i /bin/sleep 305 & sleep 306", timeout=1.5)
            assert r.timed_out
            procs = subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True).stdout
            assert "sleep 305" not in procs and "sleep 306" not in procs
            assert stranger.poll() is None  # not the sandbox's: untouched
        finally:
            stranger.kill()
            stranger.wait()


def test_local_sandbox_refuses_an_allowlist_it_could_not_enforce():
    with pytest.raises(SandboxError, match="allowlist.*cannot restrict"):
        LocalSandbox(network="allowlist", allowed_hosts=["pypi.org"])
