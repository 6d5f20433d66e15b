"""Allowlist sandboxes on the real engine. No internet is needed: two tiny HTTP servers run in
other containers (base image, `python3 -m http.server`), on the default bridge and on a test
network where they answer to DNS aliases; one is allowlisted, the other must be refused.

DNS inside the sandbox is irrelevant to the guarantee: the sandbox sits on an `internal` network
with no route out, so even an address it knows (the servers' IPs, given below) is unreachable
except through the proxy, which resolves names itself. The sandbox's own resolver answers for no
outside name (it fails, in about 2 s).
"""

from __future__ import annotations

import secrets

import pytest

from sandbox import Sandbox, SandboxConfig, SandboxError
from sandbox.constants import BASE_IMAGE, LABEL_KEY, LABEL_VALUE, RUN_LABEL_KEY, run_id
from sandbox.users import UnknownUser

CURL = "curl -sS -m 10 -o /dev/null -w '%{http_code}'"


def _ours(docker_client):
    flt = {"label": [f"{LABEL_KEY}={LABEL_VALUE}", f"{RUN_LABEL_KEY}={run_id()}"]}
    return ({c["Id"] for c in docker_client.api.containers(all=True, filters=flt)},
            {n["Id"] for n in docker_client.api.networks(filters=flt)})


@pytest.fixture(scope="module")
def upstreams(docker_client, base_image):
    """Two HTTP servers on port 8000: 'allowed' and 'denied', on the bridge and on a test network."""
    suffix = secrets.token_hex(4)
    labels = {LABEL_KEY: LABEL_VALUE, RUN_LABEL_KEY: run_id()}
    net = docker_client.networks.create(f"horizon-test-upstream-{suffix}", driver="bridge", labels=labels)
    servers = {}
    try:
        for role in ("allowed", "denied"):
            c = docker_client.containers.create(
                BASE_IMAGE, name=f"horizon-test-{role}-{suffix}", labels=labels, detach=True, init=True,
                command=["sh", "-c", f"mkdir -p /srv && echo {role}-server > /srv/index.html && "
                                     "cd /srv && exec python3 -m http.server 8000"])
            net.connect(c, aliases=[f"api.{role}.test"])
            c.start()
            servers[role] = c
        for role, c in servers.items():
            c.reload()
            ready = c.exec_run(["sh", "-c", "for i in $(seq 100); do python3 -c \"import urllib.request as u; "
                                "u.urlopen('http://127.0.0.1:8000/')\" 2>/dev/null && exit 0; sleep 0.1; done; exit 1"])
            assert ready.exit_code == 0, ready.output
        yield {"network": net.name, **{role: c.attrs["NetworkSettings"]["Networks"]["bridge"]["IPAddress"]
                                        for role, c in servers.items()},
               **{f"{role}_net_ip": c.attrs["NetworkSettings"]["Networks"][net.name]["IPAddress"]
                  for role, c in servers.items()}}
    finally:
        for c in servers.values():
            c.remove(force=True)
        net.remove()


def test_allowlist_by_ip_on_the_default_bridge(upstreams, docker_client):
    allowed, denied = upstreams["allowed"], upstreams["denied"]
    config = SandboxConfig(memory="256m", network="allowlist", allowed_hosts=[f"{allowed}:8000"])
    with Sandbox.start(config) as sb:
        assert sb.exec(f"{CURL} http://{allowed}:8000/").output == "200"
        assert sb.exec(f"curl -sS -m 10 http://{allowed}:8000/").output.strip() == "allowed-server"
        assert sb.exec(f"{CURL} --proxytunnel http://{allowed}:8000/").output == "200"  # through CONNECT
        assert sb.exec(f"{CURL} http://{denied}:8000/").output == "403"
        tunnel = sb.exec(f"curl -sS -m 10 --proxytunnel http://{denied}:8000/")
        assert tunnel.exit_code == 56 and "403" in tunnel.output
        # Bypassing the proxy: the internal network has no route to the server (nor anywhere else).
        direct = sb.exec(f"curl -sS -m 3 --noproxy '*' http://{allowed}:8000/")
        assert direct.exit_code in (7, 28), direct.output
        py = sb.exec(f"python3 -c \"import socket; socket.create_connection(('{allowed}', 8000), timeout=3)\"")
        assert py.exit_code != 0 and ("unreachable" in py.output or "timed out" in py.output), py.output
        denials = [e for e in sb.egress_log() if e["event"] == "deny"]
        assert {(e["host"], e["port"]) for e in denials} == {(denied, 8000)}
        sb.disconnect_network()  # a later phase with no network: not even the proxy is reachable
        assert sb.exec(f"curl -sS -m 3 http://{allowed}:8000/").exit_code in (7, 28)
        assert sb.exec("ls /sys/class/net").output.split() == ["lo"]
        proxy_id, network = sb.egress.proxy.id, sb.egress.network_name
    containers, networks = _ours(docker_client)
    assert proxy_id not in containers and network not in {docker_client.networks.get(n).name for n in networks}


def test_allowlist_by_name_and_wildcard_through_another_network(upstreams):
    config = SandboxConfig(memory="256m", network="allowlist", allowed_hosts=["*.allowed.test"],
                           egress_network=upstreams["network"])
    with Sandbox.start(config) as sb:
        # Python's urllib reads the proxy variables too.
        fetch = sb.exec("python3 -c \"import urllib.request as u; print(u.urlopen('http://api.allowed.test:8000/', "
                        "timeout=10).read().decode().strip())\"")
        assert fetch.output.strip() == "allowed-server", fetch.output
        assert sb.exec(f"{CURL} http://api.denied.test:8000/").output == "403"
        # The sandbox's own DNS does not know the names; the proxy resolves them on its side.
        assert sb.exec("getent hosts api.allowed.test").exit_code != 0
        assert sb.exec("getent hosts example.com").exit_code != 0
        assert sb.exec(f"curl -sS -m 3 --noproxy '*' http://{upstreams['allowed_net_ip']}:8000/").exit_code in (7, 28)


def test_failed_starts_leave_no_proxy_or_network(docker_client, base_image):
    before = _ours(docker_client)
    with pytest.raises(SandboxError, match="not present locally"):
        Sandbox.start(SandboxConfig(image="horizon/no-such-image:1", network="allowlist", allowed_hosts=["a.test"]))
    with pytest.raises(UnknownUser, match="user: 'nobody-here' does not exist"):
        Sandbox.start(SandboxConfig(user="nobody-here", network="allowlist", allowed_hosts=["a.test"]))
    with pytest.raises(SandboxError, match="egress_network: no Docker network named 'horizon-missing-net'"):
        Sandbox.start(SandboxConfig(network="allowlist", allowed_hosts=["a.test"], egress_network="horizon-missing-net"))
    assert _ours(docker_client) == before


def test_gc_removes_a_leaked_proxy_and_network(docker_client, base_image, monkeypatch):
    from sandbox.gc import collect_garbage

    # A run id of its own, so the gc cannot touch the other live containers of this session.
    monkeypatch.setenv("HORIZON_RUN_ID", f"{run_id()}-gc")
    sb = Sandbox.start(SandboxConfig(memory="256m", network="allowlist", allowed_hosts=["a.test"]))
    proxy, network = sb.egress.proxy.name, sb.egress.network_name
    docker_client.api.remove_container(sb.container_id, force=True)  # the owner died without close()
    removed = {(r.kind, r.name) for r in collect_garbage(run_id=run_id(), docker_client=docker_client)}
    assert ("container", proxy) in removed and ("network", network) in removed
    sb.close()
