"""The egress path of an allowlist sandbox: an internal Docker network and one proxy container.

The sandbox joins only an `internal` network, which has no route out of the host. The proxy
container (the offline base image running sandbox/egress_proxy.py) joins that network and
`config.egress_network` (the default bridge); it is the only way out and forwards only to allowed
hosts. The sandbox gets HTTP(S)_PROXY pointing at it; a tool that ignores them has no network at
all. Both the proxy and the network carry the sandbox labels, so `horizon sandbox gc` and the test
session's leak check find them, and `close()` removes both.
"""

from __future__ import annotations

import io
import json
import secrets
import tarfile
import time
from pathlib import Path

from sandbox.config import SandboxConfig
from sandbox.constants import BASE_IMAGE, LABEL_KEY, LABEL_VALUE, ROLE_LABEL_KEY, RUN_LABEL_KEY, run_id
from sandbox.errors import SandboxError, SandboxTimeout

PROXY_PORT = 3128
PROXY_DIR = "/opt/horizon-egress"
PROXY_SOURCES = ("egress_proxy.py", "egress_hosts.py")
NO_PROXY = "localhost,127.0.0.1,::1"
READY_TIMEOUT = 20.0


def _sources_tar() -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for name in PROXY_SOURCES:
            data = (Path(__file__).parent / name).read_bytes()
            info = tarfile.TarInfo(f"{PROXY_DIR.rsplit('/', 1)[1]}/{name}")
            info.size, info.mode = len(data), 0o644
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


class Egress:
    """One sandbox's internal network and egress proxy; `start()` leaves nothing behind on failure."""

    def __init__(self, client, network, proxy=None):
        self._client = client
        self.network = network
        self.proxy = proxy
        self.proxy_ip: str | None = None
        self._closed = False

    @property
    def network_name(self) -> str:
        return self.network.name

    @classmethod
    def start(cls, client, config: SandboxConfig, labels: dict[str, str] | None = None) -> Egress:
        import docker

        try:
            client.networks.get(config.egress_network)
        except docker.errors.NotFound:
            raise SandboxError(f"egress_network: no Docker network named {config.egress_network!r}") from None
        labels = {**(labels or config.labels), LABEL_KEY: LABEL_VALUE, RUN_LABEL_KEY: run_id(),
                  ROLE_LABEL_KEY: "egress"}
        name = f"horizon-egress-{secrets.token_hex(6)}"
        egress = cls(client, client.networks.create(name, driver="bridge", internal=True, labels=labels))
        try:
            egress._start_proxy(config, name, labels)
        except BaseException:
            egress.close()
            raise
        return egress

    def _start_proxy(self, config: SandboxConfig, name: str, labels: dict[str, str]) -> None:
        import docker

        self.network.reload()
        subnet = self.network.attrs["IPAM"]["Config"][0]["Subnet"]
        allow = [arg for host in config.allowed_hosts for arg in ("--allow", host)]
        command = ["python3", "-u", "-B", f"{PROXY_DIR}/egress_proxy.py", "--port", str(PROXY_PORT),
                   "--client-net", subnet, *allow]
        try:
            self.proxy = self._client.containers.create(
                BASE_IMAGE, command=command, name=name, labels=labels, network=config.egress_network,
                user="65534:65534", init=True, detach=True, mem_limit=128 * 1024**2, nano_cpus=int(0.5e9),
                pids_limit=64, cap_drop=["ALL"], security_opt=["no-new-privileges"],
            )
        except docker.errors.ImageNotFound as exc:
            raise SandboxError(f"the egress proxy needs {BASE_IMAGE!r} (build it with `horizon sandbox build`)") from exc
        self.proxy.put_archive(PROXY_DIR.rsplit("/", 1)[0] or "/", _sources_tar())
        self.network.connect(self.proxy)
        self.proxy.start()
        self._wait_ready()
        self.proxy.reload()
        self.proxy_ip = self.proxy.attrs["NetworkSettings"]["Networks"][name]["IPAddress"]

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + READY_TIMEOUT
        while time.monotonic() < deadline:
            logs = self.proxy.logs().decode("utf-8", "replace")
            if '"event": "listening"' in logs:
                return
            self.proxy.reload()
            if self.proxy.status not in ("created", "running"):
                raise SandboxError(f"the egress proxy exited at start: {logs.strip()[-2000:]}")
            time.sleep(0.02)
        raise SandboxTimeout(f"the egress proxy did not listen within {READY_TIMEOUT:.0f}s")

    def env(self) -> dict[str, str]:
        """Proxy variables for the sandbox (both spellings: curl reads lower case, others upper)."""
        url = f"http://{self.proxy_ip}:{PROXY_PORT}"
        return {"HTTP_PROXY": url, "HTTPS_PROXY": url, "http_proxy": url, "https_proxy": url,
                "NO_PROXY": NO_PROXY, "no_proxy": NO_PROXY}

    def log(self) -> list[dict]:
        """The proxy's decisions so far: {"event": "allow"|"deny"|"error", "host", "port", ...}."""
        if self.proxy is None or self._closed:
            return []
        events = []
        for line in self.proxy.logs(stderr=False).decode("utf-8", "replace").splitlines():
            try:
                events.append(json.loads(line))
            except json.JSONDecodeError:
                continue
        return events

    def close(self) -> None:
        """Remove the proxy, then the network (call after the sandbox container is gone). Idempotent."""
        if self._closed:
            return
        self._closed = True
        if self.proxy is not None:
            try:
                self.proxy.remove(force=True, v=True)
            except Exception:
                pass  # already gone; `horizon sandbox gc` catches what a dead engine left
        for attempt in range(5):
            try:
                self.network.remove()
                return
            except Exception as exc:  # noqa: BLE001
                if "not found" in str(exc).lower():
                    return
                time.sleep(0.1 * (attempt + 1))  # an endpoint being torn down still holds it
