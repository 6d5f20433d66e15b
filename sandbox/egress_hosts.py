"""Network modes and egress allowlist entries: parsing (validated at the edge) and matching.

Standard library only: the egress proxy container imports this file too (it is copied in next to
egress_proxy.py), so the host and the proxy can never disagree on what an entry means.

Entries: "host" (exact, case-insensitive), "*.domain" (any subdomain of domain, not domain
itself), an IPv4 address, an IPv6 address ("::1" or "[::1]"), each optionally with ":port"
("[::1]:443" for IPv6). Without a port every port of that host is allowed.
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass
from enum import Enum

_LABEL = r"[a-z0-9_](?:[a-z0-9_-]{0,61}[a-z0-9_])?"
_HOSTNAME = re.compile(rf"^{_LABEL}(?:\.{_LABEL})*$")
EXPECTED = "a host name, '*.domain' or an IP address, optionally with ':port' (e.g. 'pypi.org:443')"


class NetworkMode(str, Enum):
    NONE = "none"
    FULL = "full"
    ALLOWLIST = "allowlist"

    def __bool__(self) -> bool:
        # Code written when `network` was a bool asks `if config.network:` for "has any network".
        return self is not NetworkMode.NONE

    def __str__(self) -> str:
        return self.value


@dataclass(frozen=True)
class AllowedHost:
    host: str  # normalized: lower case, no trailing dot, IPv6 without brackets; wildcard: the suffix
    wildcard: bool = False
    port: int | None = None

    def matches(self, host: str, port: int) -> bool:
        if self.port is not None and port != self.port:
            return False
        host = normalize_host(host)
        if self.wildcard:
            return host.endswith("." + self.host)
        return host == self.host


def normalize_host(host: str) -> str:
    host = host.strip().lower().rstrip(".")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    return host


def _port(text: str, entry: str, field: str) -> int:
    if not text.isdigit() or not 0 < int(text) < 65536:
        raise ValueError(f"{field}: port must be 1-65535 in {entry!r}; expected {EXPECTED}")
    return int(text)


def parse_allowed_host(entry: object, field: str = "allowed_hosts") -> AllowedHost:
    """One allowlist entry -> AllowedHost; ValueError naming the field, the value and the form expected."""
    if not isinstance(entry, str) or not entry.strip() or entry != entry.strip():
        raise ValueError(f"{field}: expected {EXPECTED}, got {entry!r}")
    text, port = entry.lower(), None
    if "://" in text or "/" in text or "@" in text:
        raise ValueError(f"{field}: expected {EXPECTED} (no scheme, path or user), got {entry!r}")
    if text.startswith("["):  # [v6] or [v6]:port
        close = text.find("]")
        rest = text[close + 1:] if close > 0 else None
        if rest is None or (rest and not rest.startswith(":")):
            raise ValueError(f"{field}: expected {EXPECTED}, got {entry!r}")
        port = _port(rest[1:], entry, field) if rest else None
        text = text[1:close]
    elif text.count(":") == 1:
        text, port_text = text.split(":")
        port = _port(port_text, entry, field)
    try:
        return AllowedHost(str(ipaddress.ip_address(text)), port=port)
    except ValueError:
        pass
    wildcard = text.startswith("*.")
    name = normalize_host(text[2:] if wildcard else text)
    if not _HOSTNAME.match(name) or ":" in name:
        raise ValueError(f"{field}: expected {EXPECTED}, got {entry!r}")
    return AllowedHost(name, wildcard=wildcard, port=port)


def is_allowed(rules: list[AllowedHost], host: str, port: int) -> bool:
    try:  # "010.0.0.1" and "::0001" must not slip past an IP entry written the canonical way
        host = str(ipaddress.ip_address(normalize_host(host)))
    except ValueError:
        pass
    return any(rule.matches(host, port) for rule in rules)


def split_authority(authority: str, default_port: int) -> tuple[str, int]:
    """'host:port', '[v6]:port' or 'host' -> (host, port); ValueError when malformed."""
    authority = authority.strip()
    if authority.startswith("["):
        close = authority.index("]")
        host, rest = authority[1:close], authority[close + 1:]
        port = int(rest[1:]) if rest.startswith(":") else default_port
    elif authority.count(":") == 1:
        host, port_text = authority.rsplit(":", 1)
        port = int(port_text)
    else:
        host, port = authority, default_port
    if not host or not 0 < port < 65536:
        raise ValueError(f"bad authority {authority!r}")
    return host, port
