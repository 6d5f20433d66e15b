"""Isolation and resource limits: network, capabilities, pids, memory, death from outside."""

from __future__ import annotations

import os
import threading
import time

import pytest

from sandbox import ContainerDied, Sandbox, SandboxConfig


def test_no_network_only_loopback(shared_sandbox):
    assert shared_sandbox.exec("ls /sys/class/net").output.split() == ["lo"]
    r = shared_sandbox.exec("curl -sS --max-time 5 http://deb.debian.org/ -o /dev/null", timeout=30)
    assert r.exit_code != 0


def test_security_defaults(shared_sandbox):
    status = shared_sandbox.exec("grep -E '^(CapEff|NoNewPrivs)' /proc/self/status").output
    fields = dict(line.split(":\t") for line in status.strip().splitlines())
    assert fields["NoNewPrivs"] == "1"
    cap_eff = int(fields["CapEff"], 16)
    cap_sys_admin, cap_net_raw, cap_sys_ptrace = 1 << 21, 1 << 13, 1 << 19
    assert cap_eff & (cap_sys_admin | cap_net_raw | cap_sys_ptrace) == 0
    assert shared_sandbox.exec("cat /sys/fs/cgroup/pids/pids.max 2>/dev/null || cat /sys/fs/cgroup/pids.max").output.strip() == "512"
    # Nothing of the host environment leaks in.
    os.environ["HZ_HOST_SECRET"] = "leak"
    try:
        with Sandbox.start(SandboxConfig(env={"GIVEN": "1"})) as sb:
            env = sb.exec("env").output
        assert "GIVEN=1" in env and "HZ_HOST_SECRET" not in env
    finally:
        del os.environ["HZ_HOST_SECRET"]


def test_fork_bomb_is_contained_by_the_pids_limit(sandbox):
    counts = []
    stop = threading.Event()

    def watch():  # the host keeps working while the bomb runs
        while not stop.is_set():
            counts.append(len(os.listdir("/proc")))
            time.sleep(0.2)

    watcher = threading.Thread(target=watch)
    watcher.start()
    try:
        r = sandbox.exec(":(){ :|:& };:; sleep 60", timeout=6)
    finally:
        stop.set()
        watcher.join()
    assert r.timed_out
    assert counts, "the host thread could not run during the bomb"
    pids = sandbox.exec("ps -e --no-headers | wc -l", timeout=60)
    assert int(pids.output.split()[-1]) < 20, pids.output  # the bomb was reaped with the timed-out command
    assert sandbox.exec("echo usable").output == "usable\n"


def test_memory_hog_is_reported_as_oom(sandbox):
    r = sandbox.exec("python3 -c 'b = bytearray(1024 ** 3); print(len(b))'", timeout=120)
    assert r.oom_killed and r.exit_code == 137
    assert "out-of-memory killer (memory limit 256 MiB)" in r.output
    assert sandbox.exec("echo after").output == "after\n"


def test_container_killed_from_outside_raises_container_died(base_image, docker_client):
    sb = Sandbox.start(SandboxConfig())
    threading.Timer(1.0, lambda: docker_client.containers.get(sb.container_id).kill()).start()
    start = time.monotonic()
    with pytest.raises(ContainerDied, match="stopped"):
        sb.exec("sleep 100", timeout=60)
    assert time.monotonic() - start < 30
    assert sb.closed
    assert not docker_client.containers.list(sparse=True, all=True, filters={"id": sb.container_id})


def test_read_only_root_with_writable_workdir(base_image):
    with Sandbox.start(SandboxConfig(read_only_root=True)) as sb:
        assert sb.exec("touch /etc/x").exit_code != 0
        assert sb.exec("echo hi > /workspace/f && cat /workspace/f && touch /tmp/t").output == "hi\n"
        sb.write_file("/workspace/w.txt", "w")
        assert sb.read_file("/workspace/w.txt") == b"w"
