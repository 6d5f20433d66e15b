"""The radix cache's data: tree nodes, partial-page tails, and what a lookup returns."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional


class Tail:
    """A partly filled page continuing its node's tokens; moved (not copied) between tiers, so a
    `TailHit` taken before eviction still finds it afterwards."""

    __slots__ = ("tokens", "page", "on_host")

    def __init__(self, tokens: tuple, page: int, on_host: bool = False):
        self.tokens = tokens
        self.page = page
        self.on_host = on_host


class Node:
    __slots__ = ("parent", "children", "key", "device_pages", "host_pages", "lock_ref", "last_access", "sessions",
                 "tail")

    def __init__(self, parent: Optional["Node"], key: tuple, device_pages: Optional[list[int]]):
        self.parent = parent
        self.children: dict[tuple, Node] = {}
        self.key = key
        self.device_pages = device_pages
        self.host_pages: Optional[list[int]] = None
        self.lock_ref = 0
        self.last_access = 0
        self.sessions: dict[str, float] = {}  # session id -> protection expiry (clock seconds)
        self.tail: Optional[Tail] = None

    @property
    def on_device(self) -> bool:
        return self.device_pages is not None

    @property
    def num_pages(self) -> int:
        pages = self.device_pages if self.device_pages is not None else self.host_pages
        return len(pages) if pages is not None else 0

    def path(self):
        node = self
        while node.parent is not None:
            yield node
            node = node.parent


@dataclass
class Match:
    """Result of matching a token sequence: `node` is the deepest matched node (locked by the
    caller while in use); `device_pages` covers the device-resident part, `host_nodes` the part
    that must be restored from the host tier before use."""

    node: Node
    device_pages: list[int]
    host_nodes: list[Node] = field(default_factory=list)

    @property
    def num_host_pages(self) -> int:
        return sum(n.num_pages for n in self.host_nodes)


@dataclass
class TailHit:
    """The first `n` tokens after a match continue a partly matched page after `node`: its
    tail, or the first page of the child keyed `child_key`."""

    node: Node
    n: int
    tail: Optional[Tail] = None
    child_key: Optional[tuple] = None
