"""Allowlist entries, SandboxConfig's network fields, and the egress proxy itself run on the host
(real sockets on 127.0.0.1: a tiny HTTP server upstream, raw proxy requests from the test)."""

from __future__ import annotations

import asyncio
import http.server
import socket
import threading

import pytest
from pydantic import ValidationError

from sandbox import SandboxConfig
from sandbox.egress_hosts import NetworkMode, is_allowed, parse_allowed_host
from sandbox.egress_proxy import serve


def test_entries_parse_and_match():
    rules = [parse_allowed_host(e) for e in ["PyPI.org:443", "*.debian.org", "10.0.0.5", "[::1]:8080", "svc_1"]]
    assert is_allowed(rules, "pypi.org", 443) and is_allowed(rules, "pypi.org.", 443)
    assert not is_allowed(rules, "pypi.org", 80)  # the port was pinned
    assert is_allowed(rules, "deb.debian.org", 80) and is_allowed(rules, "a.b.debian.org", 1)
    assert not is_allowed(rules, "debian.org", 80)  # a wildcard covers subdomains only
    assert not is_allowed(rules, "evildebian.org", 80)
    assert is_allowed(rules, "10.0.0.5", 22) and not is_allowed(rules, "10.0.0.6", 22)
    assert is_allowed(rules, "[::1]", 8080) and is_allowed(rules, "0:0::1", 8080)
    assert is_allowed(rules, "SVC_1", 9)


@pytest.mark.parametrize("bad", ["", " x.org", "http://x.org", "x.org/path", "x.org:0", "x.org:99999",
                                 "x..org", "*", "user@x.org", "[::1", "-x.org"])
def test_bad_entries_name_field_value_and_form(bad):
    with pytest.raises(ValueError) as err:
        parse_allowed_host(bad, "allowed_hosts[0]")
    assert "allowed_hosts[0]" in str(err.value) and repr(bad) in str(err.value) and "host name" in str(err.value)


def test_config_network_modes_and_validation():
    assert SandboxConfig().network is NetworkMode.NONE and not SandboxConfig().network
    assert SandboxConfig(network=True).network is NetworkMode.FULL and SandboxConfig(network=True).network
    assert SandboxConfig(network=False).network == "none"
    cfg = SandboxConfig(network="allowlist", allowed_hosts=["pypi.org:443"])
    assert cfg.network and SandboxConfig.model_validate(cfg.model_dump()) == cfg
    with pytest.raises(ValidationError, match="network: expected 'none', 'full', 'allowlist'"):
        SandboxConfig(network="public")
    with pytest.raises(ValidationError, match="needs at least one host"):
        SandboxConfig(network="allowlist")
    with pytest.raises(ValidationError, match="only used with network='allowlist', got network='full'"):
        SandboxConfig(network=True, allowed_hosts=["pypi.org"])
    with pytest.raises(ValidationError, match=r"allowed_hosts\[1\].*'http://x'"):
        SandboxConfig(network="allowlist", allowed_hosts=["a.org", "http://x"])
    with pytest.raises(ValidationError, match="egress_network: expected the name of a Docker bridge network"):
        SandboxConfig(network="allowlist", allowed_hosts=["a.org"], egress_network="host")


class _Hello(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        body = f"hello from upstream {self.path} host={self.headers['Host']}".encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def proxy_and_upstream():
    upstream = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Hello)
    threading.Thread(target=upstream.serve_forever, daemon=True).start()
    port = _free_port()
    loop = asyncio.new_event_loop()
    task = loop.create_task(serve([f"localhost:{upstream.server_port}"], "127.0.0.1", port, None))
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    for _ in range(200):  # until it listens
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            break
        except OSError:
            threading.Event().wait(0.01)
    yield port, upstream.server_port
    loop.call_soon_threadsafe(task.cancel)
    upstream.shutdown()


def _ask(port: int, request: bytes, then: bytes = b"") -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall(request)
        if then:
            head = b""
            while b"\r\n\r\n" not in head:
                head += s.recv(4096)
            s.sendall(then)
            out = head
        else:
            out = b""
        while chunk := s.recv(65536):
            out += chunk
        return out


def test_proxy_forwards_allowed_hosts_and_refuses_others(proxy_and_upstream):
    port, up = proxy_and_upstream
    got = _ask(port, f"GET http://localhost:{up}/x?y=1 HTTP/1.1\r\nHost: localhost:{up}\r\n"
                     "Proxy-Connection: keep-alive\r\n\r\n".encode())
    assert got.startswith(b"HTTP/1.0 200") and b"hello from upstream /x?y=1" in got
    tunneled = _ask(port, f"CONNECT localhost:{up} HTTP/1.1\r\nHost: localhost:{up}\r\n\r\n".encode(),
                    then=f"GET /t HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n".encode())
    assert tunneled.startswith(b"HTTP/1.1 200 Connection established") and b"hello from upstream /t" in tunneled
    # Same server, but by a name, address or port that is not on the list.
    for target in (f"127.0.0.1:{up}", f"localhost:{up + 1 if up < 65535 else up - 1}"):
        denied = _ask(port, f"CONNECT {target} HTTP/1.1\r\n\r\n".encode())
        assert denied.startswith(b"HTTP/1.1 403") and b"not in this sandbox's egress allowlist" in denied
    denied = _ask(port, f"GET http://127.0.0.1:{up}/ HTTP/1.1\r\nHost: localhost:{up}\r\n\r\n".encode())
    assert denied.startswith(b"HTTP/1.1 403")  # the URI decides, not a forged Host header
    origin_form = _ask(port, f"GET / HTTP/1.1\r\nHost: localhost:{up}\r\n\r\n".encode())
    assert origin_form.startswith(b"HTTP/1.1 400")
