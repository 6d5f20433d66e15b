"""Eviction for the radix cache: which cached pages leave a tier when it runs short, and the
session retention that decides their order.

Eviction order, for device and host alike: unlocked leaves of the tier, unprotected ones first,
least recently used first. A node is *protected* while some session that finished on a path
through it is inside its TTL (the agent's tool is running and the next turn will extend it).
Shared prefixes stay resident because every session's match touches them and they are
ancestors of every session path: they only become leaves once all sessions below are gone.
Device eviction spills to the host tier when it has (or can make) room, else drops the node.

NOTE invariants:
- Eviction never frees or overwrites a page of a locked node, on either tier.
- A tail takes its node's place in the LRU order. Running sequences only ever hold copies of a
  tail, so it may be spilled or dropped even from a locked or inner node.
- Spilling a node spills its device tail first: a host node never holds a device tail.
"""

from __future__ import annotations

import heapq
from typing import Callable, Optional

from inference.engine.host_tier import HostTier
from inference.engine.page_allocator import PageAllocator
from inference.engine.radix_node import Node
from inference.engine.state_snapshots import NoStateSnapshots


class RadixEviction:
    """The eviction half of `RadixCache`, mixed into it: it works on the cache's tree and page
    counters, set up by `RadixCache.__init__`, and uses the cache's `_split` and `_drop_tail`."""

    page_size: int
    allocator: PageAllocator
    host: HostTier
    clock: Callable[[], float]
    root: Node
    _nodes: set[Node]
    _sessions: dict[str, Node]  # session id -> the node its protected path ends at
    device_cached_pages: int
    host_cached_pages: int
    states: NoStateSnapshots  # recurrent-state snapshots: follow their carriers, pruned by settle()

    # ---- session retention ----
    def retain(self, session_id: str, node: Node, ttl_s: float) -> None:
        """Protect the path to `node` for `ttl_s`; the session's previous path loses protection."""
        old = self._sessions.pop(session_id, None)
        if old is not None:
            for n in old.path():
                n.sessions.pop(session_id, None)
        if ttl_s <= 0 or node is self.root:
            return
        expiry = self.clock() + ttl_s
        for n in node.path():
            n.sessions[session_id] = expiry
        self._sessions[session_id] = node

    def _protected(self, node: Node, now: float) -> bool:
        if not node.sessions:
            return False
        expired = [s for s, t in node.sessions.items() if t <= now]
        for s in expired:
            del node.sessions[s]
        return bool(node.sessions)

    def is_protected(self, node: Node) -> bool:
        return self._protected(node, self.clock())

    # ---- eviction ----
    def _device_leaf(self, node: Node) -> bool:
        return (node.on_device and node.lock_ref == 0 and node.parent is not None
                and not any(c.on_device for c in node.children.values()))

    def _host_leaf(self, node: Node) -> bool:
        return not node.on_device and node.lock_ref == 0 and not node.children

    def make_room(self, num_pages: int) -> bool:
        """Evict device pages until `num_pages` are free; False if locked pages prevent it."""
        if self.allocator.num_free >= num_pages:
            return True
        done = self._evict(False, num_pages, self.clock())
        self.states.settle()  # pages that lost their snapshot go too
        return done or self.allocator.num_free >= num_pages

    def _make_host_room(self, num_pages: int, now: float, exclude: Node) -> bool:
        if self.host.num_free >= num_pages:
            return True
        return self.host.allocator.num_pages >= num_pages and self._evict(True, num_pages, now, exclude)

    def _evict(self, on_host: bool, num_pages: int, now: float, exclude: Optional[Node] = None) -> bool:
        """Free pages of one tier: unlocked leaves of that tier and tails held there, unprotected
        and least recently used first, never `exclude` (a node being spilled) or its tail. Device
        leaves spill to the host (with their tail), device tails alone likewise; host leaves and
        host tails are dropped."""
        pool = self.host if on_host else self.allocator
        is_leaf = self._host_leaf if on_host else self._device_leaf

        def entry(n: Node, whole: bool):
            return (self._protected(n, now), n.last_access, int(whole), id(n)), whole, n

        heap = [entry(n, True) for n in self._nodes if is_leaf(n) and n is not exclude]
        # A leaf's own tail goes with it; other tails are evicted alone.
        heap += [entry(n, False) for n in self._tailed(on_host)
                 if not is_leaf(n) and n is not exclude and not self.states.pinned(n.tail)]
        heapq.heapify(heap)
        while pool.num_free < num_pages and heap:
            _, whole, node = heapq.heappop(heap)
            if node is not self.root and node not in self._nodes:
                continue
            if not whole:
                if node.tail is not None and node.tail.on_host == on_host:
                    self._drop_tail(node) if on_host else self._spill_tail(node, now)
                continue
            if not is_leaf(node):
                continue
            short = num_pages - pool.num_free
            if node.num_pages > short:
                # Evict only the deepest pages: the rest of the node stays cached.
                self._split(node, node.num_pages - short)
            parent = node.parent
            self._delete_subtree(node) if on_host else self._evict_device(node, now)
            if parent in self._nodes and is_leaf(parent) and parent is not exclude:
                heapq.heappush(heap, entry(parent, True))
        return pool.num_free >= num_pages

    def _tailed(self, on_host: bool) -> list[Node]:
        nodes = [n for n in self._nodes if n.tail is not None and n.tail.on_host == on_host]
        if self.root.tail is not None and self.root.tail.on_host == on_host:
            nodes.append(self.root)  # the root is in no node set, but its tail is evictable
        return nodes

    def _evict_device(self, node: Node, now: float) -> None:
        if node.tail is not None and not node.tail.on_host:
            self._spill_tail(node, now)  # first: a host node never holds a device tail
        n = len(node.device_pages)
        if self.host.enabled and self._make_host_room(n, now, exclude=node):
            node.host_pages = self.host.spill(node.device_pages)
            self.host_cached_pages += n
            self.allocator.free(node.device_pages)
            self.device_cached_pages -= n
            node.device_pages = None
            self.states.spilled(node)
        else:
            self._delete_subtree(node)

    def _spill_tail(self, node: Node, now: float) -> None:
        """Move a device tail to the host tier, or drop it when the host has no room."""
        tail = node.tail
        if not self.host.enabled or not self._make_host_room(1, now, exclude=node):
            self._drop_tail(node)
            return
        (host_page,) = self.host.spill([tail.page])
        self.allocator.free([tail.page])
        self.device_cached_pages -= 1
        self.host_cached_pages += 1
        tail.page, tail.on_host = host_page, True
        self.states.spilled(tail)

    def _delete_subtree(self, node: Node) -> None:
        for child in list(node.children.values()):
            self._delete_subtree(child)
        self._drop_tail(node)
        if node.on_device:
            self.allocator.free(node.device_pages)
            self.device_cached_pages -= len(node.device_pages)
        elif node.host_pages is not None:
            self.host.drop(node.host_pages)
            self.host_cached_pages -= len(node.host_pages)
        del node.parent.children[node.key[:self.page_size]]
        self._nodes.discard(node)
        self.states.forget(node)

    def clear(self) -> None:
        """Drop every unlocked node (both tiers) and the root's tail (running sequences only
        ever hold copies of tails)."""
        self._drop_tail(self.root)
        for child in list(self.root.children.values()):
            self._clear_unlocked(child)
        self.states.settle()

    def _clear_unlocked(self, node: Node) -> None:
        for child in list(node.children.values()):
            self._clear_unlocked(child)
        if node.lock_ref == 0 and not node.children:
            self._delete_subtree(node)
