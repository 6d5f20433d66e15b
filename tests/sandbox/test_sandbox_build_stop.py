"""A task image build that runs past its timeout, or is cancelled, really stops on the engine."""

from __future__ import annotations

import re
import threading
import time
import uuid

import pytest

from sandbox import ImageBuildError
from sandbox.images import ImageBuildTimeout, build_image


def slow_build_context(tmp_path, base_image) -> tuple[str, str]:
    """A Dockerfile whose RUN step sleeps 60 s; (tag, marker that appears in the build container's
    command line)."""
    marker = f"hz-slow-build-{uuid.uuid4().hex[:10]}"
    (tmp_path / "Dockerfile").write_text(f"FROM {base_image}\nRUN sleep 60 # {marker}\n", encoding="utf-8")
    return f"horizon-test/slow-build:{marker}", marker


def build_containers(docker_client, marker: str) -> list[str]:
    """Every container (running or not) whose command carries `marker`."""
    rows = docker_client.api.containers(all=True)
    return [f"{row['Id'][:12]} {row['Status']}" for row in rows if marker in row.get("Command", "")]


def test_a_build_past_its_timeout_is_stopped_and_its_container_removed(base_image, docker_client, tmp_path):
    tag, marker = slow_build_context(tmp_path, base_image)
    started = time.monotonic()
    with pytest.raises(ImageBuildTimeout, match=re.escape(tag)) as caught:
        build_image(tmp_path, tag, trust_host_ca=False, docker_client=docker_client, timeout=3)
    elapsed = time.monotonic() - started
    assert "within 3s" in str(caught.value) and f"RUN sleep 60 # {marker}" in str(caught.value)
    assert elapsed < 60  # a build left running ends only after its `sleep 60`
    assert build_containers(docker_client, marker) == []
    assert not docker_client.api.images(name=tag)


def test_a_build_that_does_not_end_when_told_is_cut_off_at_the_connection(base_image, docker_client, tmp_path,
                                                                            monkeypatch):
    """No grace for the build to fail by itself: the request's connection is shut at once, the engine
    cancels the build, and the containers it announced are removed."""
    import sandbox.images

    monkeypatch.setattr(sandbox.images, "_STOP_GRACE", 0.0)
    tag, marker = slow_build_context(tmp_path, base_image)
    with pytest.raises(ImageBuildTimeout, match=re.escape(tag)):
        build_image(tmp_path, tag, trust_host_ca=False, docker_client=docker_client, timeout=3)
    assert build_containers(docker_client, marker) == []


def test_a_cancelled_build_is_stopped_and_its_container_removed(base_image, docker_client, tmp_path):
    tag, marker = slow_build_context(tmp_path, base_image)
    cancel = threading.Event()
    box: dict = {}

    def build() -> None:
        try:
            box["result"] = build_image(tmp_path, tag, trust_host_ca=False, docker_client=docker_client,
                                        cancel=cancel)
        except Exception as exc:  # handed to the test's thread
            box["error"] = exc

    worker = threading.Thread(target=build)
    worker.start()
    for _ in range(600):  # until the RUN step's container runs
        if any("Up" in row for row in build_containers(docker_client, marker)):
            break
        time.sleep(0.1)
    else:
        raise AssertionError("the build container never started")
    cancel.set()
    worker.join(120)
    assert not worker.is_alive()
    assert isinstance(box.get("error"), ImageBuildError) and not isinstance(box["error"], ImageBuildTimeout)
    assert "was cancelled" in str(box["error"]) and tag in str(box["error"])
    assert build_containers(docker_client, marker) == []


def test_a_build_within_its_timeout_succeeds(base_image, docker_client, tmp_path):
    (tmp_path / "Dockerfile").write_text(f"FROM {base_image}\nRUN echo built > /built.txt\n", encoding="utf-8")
    tag = f"horizon-test/quick-build:{uuid.uuid4().hex[:10]}"
    try:
        image_id = build_image(tmp_path, tag, trust_host_ca=False, docker_client=docker_client, timeout=300)
        assert docker_client.images.get(tag).id == image_id
    finally:
        docker_client.api.remove_image(tag, force=True)


def test_a_timeout_must_be_positive(tmp_path):
    with pytest.raises(ValueError, match="timeout must be > 0 seconds, got 0"):
        build_image(tmp_path, "horizon-test/never:1", timeout=0)
