"""Starting, isolating, cleaning up; configuration validated at the edge."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid
from concurrent.futures import ThreadPoolExecutor

import pytest
from pydantic import ValidationError

from sandbox import (
    LABEL_KEY,
    RUN_LABEL_KEY,
    DaemonUnavailable,
    ImageNotFound,
    Mount,
    Sandbox,
    SandboxClosed,
    SandboxConfig,
)
from sandbox.constants import run_id
from sandbox.gc import collect_garbage


def _exists(docker_client, container_id: str) -> bool:
    return bool(docker_client.containers.list(sparse=True, all=True, filters={"id": container_id}))


def test_labels_and_removal_on_close(base_image, docker_client):
    with Sandbox.start(SandboxConfig(labels={"task": "t1"})) as sb:
        labels = docker_client.containers.get(sb.container_id).labels
        assert labels[LABEL_KEY] and labels[RUN_LABEL_KEY] == run_id() == os.environ["HORIZON_RUN_ID"]
        assert labels["task"] == "t1"
    assert not _exists(docker_client, sb.container_id)
    with pytest.raises(SandboxClosed):
        sb.exec("true")
    sb.close()  # idempotent


def test_cleanup_after_an_exception_inside_with(base_image, docker_client):
    with pytest.raises(RuntimeError, match="boom"):
        with Sandbox.start(SandboxConfig()) as sb:
            sb.exec("echo working")
            raise RuntimeError("boom")
    assert not _exists(docker_client, sb.container_id)


def test_eight_parallel_sandboxes_are_isolated(base_image):
    def job(i: int) -> tuple[str, str, str]:
        with Sandbox.start(SandboxConfig(memory="256m")) as sb:
            sb.exec(f"echo {i} > /workspace/id && export MINE={i}")
            sb.write_file("/workspace/host.txt", f"host-{i}")
            time.sleep(0.5)  # overlap with the others
            out = sb.exec("cat /workspace/id; echo $MINE; ls /workspace | wc -l").output
            return out, sb.read_file("/workspace/host.txt").decode(), sb.exec("hostname").output

    with ThreadPoolExecutor(max_workers=8) as pool:
        results = list(pool.map(job, range(8)))
    for i, (out, host_file, _hostname) in enumerate(results):
        assert out == f"{i}\n{i}\n2\n"
        assert host_file == f"host-{i}"


def _leak(monkeypatch) -> Sandbox:
    """A sandbox nobody will close, as a crashed run leaves it, under a run id of its own (so gc
    cannot touch sandboxes other tests of this session still use)."""
    monkeypatch.setenv("HORIZON_RUN_ID", f"leak-{uuid.uuid4().hex[:8]}")
    leaked = Sandbox.start(SandboxConfig())
    leaked._closed = True
    return leaked


def test_gc_removes_a_leaked_container(base_image, docker_client, monkeypatch):
    leaked = _leak(monkeypatch)
    assert _exists(docker_client, leaked.container_id)
    assert collect_garbage(older_than=3600, run_id=run_id(), docker_client=docker_client) == []
    removed = collect_garbage(run_id=run_id(), docker_client=docker_client)
    assert leaked.container_id not in {c.id for c in docker_client.containers.list(sparse=True, all=True)}
    assert any(r.name.startswith("horizon-sb-") for r in removed)


def test_gc_cli(base_image, docker_client, monkeypatch):
    leaked = _leak(monkeypatch)
    env = {**os.environ}
    out = subprocess.run([sys.executable, "-m", "agent.cli.main", "sandbox", "gc", "--run", run_id()],
                         capture_output=True, text=True, env=env, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "removed" in out.stdout and not _exists(docker_client, leaked.container_id)


def test_missing_image_is_explicit(base_image):
    with pytest.raises(ImageNotFound, match="no-such-image:latest.*never pulled"):
        Sandbox.start(SandboxConfig(image="no-such-image:latest"))


def test_unreachable_daemon_is_explicit():
    with pytest.raises(DaemonUnavailable, match="no Docker engine answers at unix:///nonexistent/docker.sock"):
        Sandbox.start(SandboxConfig(docker_host="unix:///nonexistent/docker.sock"))


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("memory", "lots", "memory: expected a size like '512m'"),
        ("memory", "1k", "at least 6 MiB"),
        ("cpus", 0, "cpus: expected a positive number"),
        ("pids_limit", 3, "pids_limit: expected at least 16"),
        ("workdir", "relative/dir", "workdir: expected an absolute path"),
        ("image", "", "image: expected an image reference"),
        ("output_limit", 10, "output_limit: expected at least 256"),
        ("env", {"A=B": "x"}, "env: invalid name 'A=B'"),
        ("command_timeout", -1, "command_timeout: expected a positive number"),
        ("netwrk", True, "netwrk"),
    ],
)
def test_bad_config_values_name_the_field(field, value, message):
    with pytest.raises(ValidationError) as info:
        SandboxConfig(**{field: value})
    assert message in str(info.value) and field in str(info.value)


def test_bad_mount_is_rejected():
    with pytest.raises(ValidationError, match="source: expected an absolute path"):
        Mount(source="rel", target="/x")


def test_explicit_mount(base_image, tmp_path):
    (tmp_path / "in.txt").write_text("from host")
    cfg = SandboxConfig(mounts=[Mount(source=str(tmp_path), target="/data", read_only=True)])
    with Sandbox.start(cfg) as sb:
        assert sb.exec("cat /data/in.txt").output == "from host"
        assert sb.exec("touch /data/new").exit_code != 0


def test_memory_is_normalized():
    assert SandboxConfig(memory="1.5g").memory_bytes == 1536 * 1024**2
    assert SandboxConfig(memory=64 * 1024**2).memory_bytes == 64 * 1024**2


def test_engine_rejections_are_reported_without_leaks(base_image, docker_client):
    from sandbox import SandboxError

    ours = {"label": f"{RUN_LABEL_KEY}={run_id()}"}
    before = {c.id for c in docker_client.containers.list(sparse=True, all=True, filters=ours)}
    with pytest.raises(SandboxError, match="CPUs"):
        Sandbox.start(SandboxConfig(cpus=4096))
    assert {c.id for c in docker_client.containers.list(sparse=True, all=True, filters=ours)} <= before


def test_no_file_descriptors_leak_across_sandboxes(base_image):
    def open_fds() -> int:
        return len(os.listdir("/proc/self/fd"))

    counts = []
    for _ in range(5):
        with Sandbox.start(SandboxConfig()) as sb:
            sb.exec("echo hi")
            sb.exec_once(["true"])
            sb.write_file("/tmp/x", "y")
            sb.read_file("/tmp/x")
        counts.append(open_fds())
    assert counts[-1] <= counts[1], counts
