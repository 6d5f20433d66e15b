"""Radix tree over token ids at page granularity, tuned for agent loops.

Each node owns a run of whole pages, either on the device or (after eviction) in the host tier.
Device-resident nodes form a subtree that contains the root; host-resident nodes hang below it.
Running sequences lock their matched path (lock_ref), so it is never evicted under them.
This file holds lookup, insertion and tails; which pages leave a tier under pressure, and how a
session's TTL protects its path meanwhile, is in radix_eviction.py.

Hits at any token offset: whole pages are shared in place; a finished sequence's partly filled
last page stays as its node's *tail*. A request whose match ends inside a page (a tail, or the
first page of a child) gets a private copy of that page, so only the tokens after the common
prefix are recomputed. Tails spill to the host tier like whole pages (an agent's previous turn
usually ends mid-page) and are copied from there straight into the request's private page.

NOTE invariants (checked by the tests after every operation):
- device: allocator.num_free + device_cached_pages + pages held privately by sequences
  == allocator.num_pages; host: host.num_free + host_cached_pages == host pages. Both counts
  include tail pages, in the tier that holds them.
- A node has at most one tail, on the device or on the host. A device tail implies a device node
  (spilling a node spills its tail first); a host tail may hang on either kind of node.
- A tail page is never shared with a running sequence (it gets a copy), so a tail may be spilled
  or dropped even from a locked or inner node; it takes its node's place in the LRU order.
- Eviction never frees or overwrites a page of a locked node, on either tier (radix_eviction.py).
"""
from __future__ import annotations

import time
from typing import Callable, Optional

from inference.engine.host_tier import HostTier
from inference.engine.page_allocator import PageAllocator
from inference.engine.radix_eviction import RadixEviction
from inference.engine.radix_node import Match, Node, Tail, TailHit
from inference.engine.state_snapshots import NoStateSnapshots

__all__ = ["Match", "Node", "RadixCache", "Tail", "TailHit"]


class RadixCache(RadixEviction):
    def __init__(self, page_size: int, allocator: PageAllocator, host: Optional[HostTier] = None,
                 clock: Callable[[], float] = time.monotonic, enabled: bool = True,
                 copy_page: Optional[Callable[[int, int], None]] = None,
                 states: Optional[NoStateSnapshots] = None):
        self.page_size = page_size
        self.allocator = allocator
        self.host = host if host is not None else HostTier(0)
        self.clock = clock
        self.enabled = enabled
        self.copy_page = copy_page  # copies one device page's KV (None: accounting only)
        # Recurrent-state snapshots a hit also needs (hybrid models, state_snapshots.py); the
        # default attachment does nothing.
        self.states = states if states is not None else NoStateSnapshots()
        self.root = Node(None, (), [])
        self.root.lock_ref = 1
        self._nodes: set[Node] = set()
        self._sessions: dict[str, Node] = {}
        self._tick = 0
        self.device_cached_pages = 0
        self.host_cached_pages = 0
        self.states.attach(self)

    # ---- lookup ----
    def _page(self, tokens, i: int) -> tuple:
        ps = self.page_size
        return tuple(tokens[i * ps:(i + 1) * ps])

    def _common_pages(self, node: Node, tokens, start: int, limit: int) -> int:
        ps = self.page_size
        n = 0
        for j in range(min(node.num_pages, limit - start)):
            if node.key[j * ps:(j + 1) * ps] != tuple(tokens[(start + j) * ps:(start + j + 1) * ps]):
                break
            n += 1
        return n

    def peek(self, tokens, max_pages: int) -> int:
        """Matched pages (both tiers) without touching the tree; for admission ordering."""
        if not self.enabled:
            return 0
        node, i = self.root, 0
        while i < max_pages:
            child = node.children.get(self._page(tokens, i))
            if child is None:
                break
            n = self._common_pages(child, tokens, i, max_pages)
            i += n
            if n < child.num_pages:
                break
            node = child
        return i

    def match(self, tokens, max_pages: int) -> Match:
        """Longest cached prefix of `tokens` in whole pages, at most `max_pages`."""
        node, i = self.root, 0
        device_pages: list[int] = []
        host_nodes: list[Node] = []
        self._tick += 1
        while self.enabled and i < max_pages:
            child = node.children.get(self._page(tokens, i))
            if child is None:
                break
            n = self._common_pages(child, tokens, i, max_pages)
            if n < child.num_pages:
                child = self._split(child, n)
            child.last_access = self._tick
            if child.on_device:
                device_pages.extend(child.device_pages)
            else:
                host_nodes.append(child)
            node, i = child, i + n
        return Match(node, device_pages, host_nodes)

    def _split(self, node: Node, n: int) -> Node:
        """Cut `node` after n pages; the new upper part is returned, `node` stays the lower part
        (so session handles that point at it remain valid)."""
        ps = self.page_size
        upper = Node(node.parent, node.key[:n * ps], None)
        if node.on_device:
            upper.device_pages, node.device_pages = node.device_pages[:n], node.device_pages[n:]
        else:
            upper.host_pages, node.host_pages = node.host_pages[:n], node.host_pages[n:]
        upper.lock_ref = node.lock_ref
        upper.last_access = node.last_access
        upper.sessions = dict(node.sessions)
        node.parent.children[node.key[:ps]] = upper
        node.key = node.key[n * ps:]
        node.parent = upper
        upper.children[node.key[:ps]] = node
        self._nodes.add(upper)
        return upper

    # ---- locking ----
    def lock(self, node: Node) -> None:
        for n in node.path():
            n.lock_ref += 1

    def unlock(self, node: Node) -> None:
        for n in node.path():
            n.lock_ref -= 1
            assert n.lock_ref >= 0, "unbalanced unlock"

    # ---- host restore ----
    def restore(self, match: Match) -> list[int]:
        """Bring the host part of a (locked) match back to the device; returns its new pages.
        The caller has made room with `make_room`."""
        restored: list[int] = []
        for node in match.host_nodes:
            pages = self.allocator.alloc(len(node.host_pages))
            self.host.restore(node.host_pages, pages)
            self.host_cached_pages -= len(pages)
            self.device_cached_pages += len(pages)
            node.device_pages, node.host_pages = pages, None
            restored.extend(pages)
        match.device_pages = match.device_pages + restored
        match.host_nodes = []
        return restored

    # ---- insertion ----
    def insert(self, tokens, pages: list[int]) -> tuple[Node, list[int]]:
        """Give the tree the pages holding `tokens` (len(pages) whole pages). Returns the node
        that ends the path and the pages the tree did not take (the caller frees them): those
        whose tokens were already cached under a different page."""
        if not self.enabled:
            return self.root, list(pages)
        node, i, leftover = self.root, 0, []
        self._tick += 1
        while i < len(pages):
            child = node.children.get(self._page(tokens, i))
            if child is None:
                ps = self.page_size
                child = Node(node, tuple(tokens[i * ps:len(pages) * ps]), list(pages[i:]))
                node.children[child.key[:ps]] = child
                self._nodes.add(child)
                self.device_cached_pages += len(pages) - i
                child.last_access = self._tick
                if node.tail is not None and child.key[:len(node.tail.tokens)] == node.tail.tokens:
                    # NOTE: the new child's first page serves every hit the tail could (an
                    # agent's next turn extends the last one), so the tail is dead weight; kept,
                    # it would stay as fresh as the busy path above it and crowd out live pages.
                    self._drop_tail(node)
                return child, leftover
            n = self._common_pages(child, tokens, i, len(pages))
            if n < child.num_pages:
                child = self._split(child, n)
            if child.on_device:
                leftover.extend(p for p, q in zip(pages[i:i + n], child.device_pages) if p != q)
            else:
                # Our device copy is as good as the host one and already where it is needed.
                self.host.drop(child.host_pages)
                self.host_cached_pages -= n
                self.device_cached_pages += n
                child.device_pages, child.host_pages = list(pages[i:i + n]), None
            child.last_access = self._tick
            node, i = child, i + n
        return node, leftover

    # ---- partial last pages ----
    def attach_tail(self, node: Node, tokens: tuple, page: int) -> bool:
        """Keep a finished sequence's partly filled last page after `node`, so its next turn
        reuses every token with KV, not just the whole pages. False: the caller frees the page."""
        # The root takes a tail too: it is where a prompt shorter than one page ends.
        if not self.enabled or not node.on_device or not tokens:
            return False
        if any(key[:len(tokens)] == tokens for key in node.children):
            return False  # a child's first page already holds these tokens (see match_tail)
        self._drop_tail(node)
        node.tail = Tail(tokens, page)
        node.last_access = self._tick  # the root is never matched, so its tail's LRU age starts here
        self.device_cached_pages += 1
        return True

    def match_tail(self, node: Node, tokens, start: int, limit: int) -> Optional[TailHit]:
        """The longest run of tokens[start:limit], n > 0, that a cached page continuing `node`
        already holds at its start: its tail or the first page of a child (the KV of a slot
        depends only on the tokens up to it, so a page serves any request sharing its leading
        tokens). None when no page does."""
        want = tuple(tokens[start:min(limit, start + self.page_size)])
        best: Optional[TailHit] = None
        if node.tail is not None:
            n = _common_prefix(node.tail.tokens, want)
            if n:
                best = TailHit(node, n, tail=node.tail)
        for key in node.children:
            if want and key[0] == want[0]:
                n = _common_prefix(key, want)
                if best is None or n > best.n:
                    best = TailHit(node, n, child_key=key)
        return best

    def take_tail(self, hit: TailHit) -> Optional[tuple[int, bool]]:
        """(page, copied from the host): a private device page holding the hit's tokens, for a
        sequence that continues writing into it; None when eviction has dropped the source since
        the match (the caller recomputes those tokens). The caller has made room for the page.

        NOTE: the source stays where it is, on either tier: a partial page is never shared in
        place, so moving a host tail back to the device would only cost a second device page."""
        if hit.tail is not None:
            if hit.node.tail is not hit.tail:
                return None
            src, on_host = hit.tail.page, hit.tail.on_host
        else:
            # Looked up again: eviction may have split the child (its first page is then held
            # by the new upper part), spilled it, or dropped it.
            child = hit.node.children.get(hit.child_key)
            if child is None:
                return None
            child.last_access = self._tick
            src, on_host = (child.device_pages[0], False) if child.on_device else (child.host_pages[0], True)
        page = self.allocator.alloc(1)[0]
        if on_host:
            self.host.load([src], [page])
        elif self.copy_page is not None:
            self.copy_page(src, page)
        return page, on_host

    def _drop_tail(self, node: Node) -> None:
        tail, node.tail = node.tail, None
        if tail is None:
            return
        self.states.forget_tail(node, tail)
        if tail.on_host:
            self.host.drop([tail.page])
            self.host_cached_pages -= 1
        else:
            self.allocator.free([tail.page])
            self.device_cached_pages -= 1

    def resident_sessions(self) -> list[str]:
        """Sessions whose protected path still ends on the device: their next turn hits without a
        host restore (what "sessions held at once" counts in benchmarks/agent_cache.py)."""
        now = self.clock()
        return [sid for sid, node in self._sessions.items() if node.on_device and node.sessions.get(sid, 0.0) > now]

    def stats(self) -> dict:
        tails = [n.tail for n in [self.root, *self._nodes] if n.tail is not None]
        return {
            "device_cached_pages": self.device_cached_pages,
            "host_cached_pages": self.host_cached_pages,
            "device_tail_pages": sum(not t.on_host for t in tails),
            "host_tail_pages": sum(t.on_host for t in tails),
            "nodes": len(self._nodes),
            "sessions_retained": len(self._sessions),
        }


def _common_prefix(a: tuple, b: tuple) -> int:
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n
