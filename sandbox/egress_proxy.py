"""The egress proxy that runs in its own container next to an allowlist sandbox (stdlib only).

    python3 egress_proxy.py --port 3128 --client-net 172.30.0.0/16 --allow pypi.org:443 --allow '*.debian.org'

It speaks the two forms HTTP clients use through a proxy: `CONNECT host:port` (HTTPS and any
other TCP tunnel) and absolute-URI requests (`GET http://host/path`, plain HTTP). The host the
client names is checked against the allowlist before anything is resolved or connected; anything
else gets 403 and a JSON line on stdout ({"event": "deny", ...}), which `docker logs` keeps.
Only clients from the sandbox's internal network are served, so containers on the outside network
cannot use it as a way in. Plain HTTP is forwarded one request per connection (Connection: close
upstream), so a kept-alive client cannot send a second request past the check.
"""

from __future__ import annotations

import argparse
import asyncio
import ipaddress
import json
import sys
import time
from urllib.parse import urlsplit

try:
    from sandbox.egress_hosts import AllowedHost, is_allowed, parse_allowed_host, split_authority
except ImportError:  # in the proxy container, where egress_hosts.py sits next to this file
    from egress_hosts import AllowedHost, is_allowed, parse_allowed_host, split_authority

MAX_HEAD = 64 * 1024
CONNECT_TIMEOUT = 15.0
HOP_BY_HOP = {"proxy-connection", "proxy-authorization", "connection", "keep-alive"}


def log(event: str, **fields) -> None:
    print(json.dumps({"event": event, "time": round(time.time(), 3), **fields}), flush=True)


class EgressProxy:
    def __init__(self, rules: list[AllowedHost], client_net):
        self.rules = rules
        self.client_net = client_net

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        peer = writer.get_extra_info("peername") or ("?", 0)
        try:
            if self.client_net is not None and ipaddress.ip_address(peer[0]) not in self.client_net:
                log("deny", reason="client outside the sandbox network", client=peer[0])
                return
            head = await reader.readuntil(b"\r\n\r\n")
            await self._serve(head, reader, writer, peer[0])
        except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, ConnectionError, ValueError):
            pass
        finally:
            writer.close()

    async def _serve(self, head: bytes, reader, writer, client: str) -> None:
        lines = head.decode("latin-1").split("\r\n")
        try:
            method, target, version = lines[0].split(" ")
        except ValueError:
            return await self._reply(writer, 400, "malformed request line")
        if method == "CONNECT":
            host, port = split_authority(target, 443)
            rest = b""
        else:
            url = urlsplit(target)
            if url.scheme != "http" or not url.netloc:
                return await self._reply(writer, 400, "expected an absolute http:// URI or CONNECT")
            host, port = split_authority(url.netloc, 80)
            path = (url.path or "/") + (f"?{url.query}" if url.query else "")
            headers = [h for h in lines[1:] if h and h.split(":", 1)[0].strip().lower() not in HOP_BY_HOP]
            rest = "\r\n".join([f"{method} {path} {version}", *headers, "Connection: close", "", ""]).encode("latin-1")
        if not is_allowed(self.rules, host, port):
            log("deny", method=method, host=host, port=port, client=client)
            return await self._reply(writer, 403, f"{host}:{port} is not in this sandbox's egress allowlist")
        try:
            up_reader, up_writer = await asyncio.wait_for(asyncio.open_connection(host, port), CONNECT_TIMEOUT)
        except (OSError, asyncio.TimeoutError) as exc:
            log("error", method=method, host=host, port=port, client=client, error=str(exc) or type(exc).__name__)
            return await self._reply(writer, 502, f"cannot reach {host}:{port}: {exc}")
        log("allow", method=method, host=host, port=port, client=client)
        if method == "CONNECT":
            writer.write(b"HTTP/1.1 200 Connection established\r\n\r\n")
        else:
            up_writer.write(rest)
        await writer.drain()
        await asyncio.gather(self._pipe(reader, up_writer), self._pipe(up_reader, writer))

    @staticmethod
    async def _pipe(src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
        try:
            while chunk := await src.read(65536):
                dst.write(chunk)
                await dst.drain()
        except (ConnectionError, OSError):
            pass
        finally:
            try:
                if dst.can_write_eof():
                    dst.write_eof()
                else:
                    dst.close()
            except (OSError, RuntimeError):
                dst.close()

    @staticmethod
    async def _reply(writer: asyncio.StreamWriter, status: int, message: str) -> None:
        reason = {400: "Bad Request", 403: "Forbidden", 502: "Bad Gateway"}[status]
        body = f"horizon egress proxy: {message}\n".encode()
        writer.write(f"HTTP/1.1 {status} {reason}\r\nContent-Type: text/plain\r\nContent-Length: {len(body)}\r\n"
                     "Connection: close\r\n\r\n".encode() + body)
        await writer.drain()


async def serve(entries: list[str], host: str, port: int, client_net) -> None:
    rules = [parse_allowed_host(entry, f"--allow {entry!r}") for entry in entries]
    proxy = EgressProxy(rules, client_net)
    server = await asyncio.start_server(proxy.handle, host, port, limit=MAX_HEAD)
    log("listening", port=server.sockets[0].getsockname()[1], allowed=entries)
    async with server:
        await server.serve_forever()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="0.0.0.0")
    parser.add_argument("--port", type=int, default=3128)
    parser.add_argument("--allow", action="append", default=[], help="an allowlist entry (repeatable)")
    parser.add_argument("--client-net", default=None, help="only serve clients from this subnet")
    args = parser.parse_args(argv)
    client_net = ipaddress.ip_network(args.client_net) if args.client_net else None
    asyncio.run(serve(args.allow, args.host, args.port, client_net))
    return 0


if __name__ == "__main__":
    sys.exit(main())
