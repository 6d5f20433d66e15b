"""Fixtures shared by every area's tests.

Docker: tests that need an engine take the `docker_client` fixture. When HORIZON_REQUIRE_DOCKER=1
(the README's test command and CI set it) a missing engine is a failure, never a skip.
"""

from __future__ import annotations

import os
import uuid
from pathlib import Path

import pytest

SANDBOX_LABEL_KEY = "dev.horizon.sandbox"  # must equal sandbox.constants.LABEL_KEY
RUN_LABEL_KEY = "dev.horizon.run"  # sandbox.constants.RUN_LABEL_KEY: set from $HORIZON_RUN_ID

# Every container this test session creates is labelled with this run id, so the leak check
# below only sees our own containers, even when several test sessions share one engine.
os.environ["HORIZON_RUN_ID"] = f"pytest-{os.getpid()}-{uuid.uuid4().hex[:8]}"


def _docker_or_reason():
    try:
        import docker

        client = docker.from_env(timeout=30)
        client.ping()
        return client, None
    except Exception as exc:  # the reason is shown in the skip/fail message
        return None, f"no Docker engine answers: {exc}"


@pytest.fixture(scope="session")
def docker_client():
    client, reason = _docker_or_reason()
    if client is None:
        if os.environ.get("HORIZON_REQUIRE_DOCKER") == "1":
            pytest.fail(reason + " (HORIZON_REQUIRE_DOCKER=1: run scripts/setup.sh)")
        pytest.skip(reason)
    yield client


@pytest.fixture(scope="session")
def tiny_checkpoint(tmp_path_factory) -> Path:
    """A tiny random GLM-5.x checkpoint (real on-disk format, with MTP layer and tokenizer)."""
    from inference.random_checkpoint import write_random_checkpoint

    out = tmp_path_factory.mktemp("ckpt-tiny")
    write_random_checkpoint(out, preset="tiny", seed=0)
    return out


@pytest.fixture(scope="module")
def one_torch_thread():
    """One intra-op torch thread for a module of tiny models: they are overhead-bound, and on a
    shared CPU a second thread only adds contention (measured 20x slower forwards under load).
    Module scope, requested first (autouse or usefixtures), so it also covers the module's model
    fixtures. Restored afterwards."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def pytest_sessionfinish(session, exitstatus):
    """No sandbox container (egress proxies included) or egress network may outlive the session."""
    from sandbox.docker_client import labelled_containers, remove_container

    client, _ = _docker_or_reason()
    if client is None:
        return
    run_filter = f"{RUN_LABEL_KEY}={os.environ['HORIZON_RUN_ID']}"
    leaked = labelled_containers(client, [run_filter])
    networks = client.api.networks(filters={"label": [run_filter]})
    if leaked or networks:
        names = [name for c in leaked for name in c.get("Names", [c["Id"][:12]])] + [n["Name"] for n in networks]
        session.config.pluginmanager.get_plugin("terminalreporter").write_line(
            f"LEAKED SANDBOX CONTAINERS/NETWORKS after the test session: {', '.join(names)}", red=True
        )
        for c in leaked:
            remove_container(client, c["Id"])
        for n in networks:
            try:
                client.api.remove_network(n["Id"])
            except Exception:
                pass
        session.exitstatus = 1
