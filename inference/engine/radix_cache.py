"""Radix tree over token ids at page granularity, tuned for agent loops.

Each node owns a run of whole pages, either on the device or (after eviction) in the host tier.
Device-resident nodes form a subtree that contains the root; host-resident nodes hang below it.
Running sequences lock their matched path (lock_ref), so it is never evicted under them.

Eviction order, for device and host alike: unlocked leaves of the tier, unprotected ones first,
least recently used first. A node is *protected* while some session that finished on a path
through it is inside its TTL (the agent's tool is running and the next turn will extend it).
Shared prefixes stay resident because every session's match touches them and they are
ancestors of every session path: they only become leaves once all sessions below are gone.
Device eviction spills to the host tier when it has (or can make) room, else drops the node.

Hits at any token offset: whole pages are shared in place; a finished sequence's partly filled
last page stays as its node's *tail* (device only), and a request that continues those tokens
gets a private copy of it, so only the tokens after the common prefix are recomputed.
"""

from __future__ import annotations

import heapq
import time
from dataclasses import dataclass, field
from typing import Callable, Optional

from inference.engine.host_tier import HostTier
from inference.engine.page_allocator import PageAllocator


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
        # A partly filled page that continues this node's tokens (device only): (tokens, page).
        self.tail: Optional[tuple[tuple, int]] = None

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


class RadixCache:
    def __init__(self, page_size: int, allocator: PageAllocator, host: Optional[HostTier] = None,
                 clock: Callable[[], float] = time.monotonic, enabled: bool = True,
                 copy_page: Optional[Callable[[int, int], None]] = None):
        self.page_size = page_size
        self.allocator = allocator
        self.host = host if host is not None else HostTier(0)
        self.clock = clock
        self.enabled = enabled
        self.copy_page = copy_page  # copies one device page's KV (None: accounting only)
        self.root = Node(None, (), [])
        self.root.lock_ref = 1
        self._nodes: set[Node] = set()
        self._sessions: dict[str, Node] = {}
        self._tick = 0
        self.device_cached_pages = 0
        self.host_cached_pages = 0

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
        self._drop_tail(node)
        node.tail = (tokens, page)
        node.last_access = self._tick  # the root is never matched, so its tail's LRU age starts here
        self.device_cached_pages += 1
        return True

    def match_tail(self, node: Node, tokens, start: int, limit: int) -> tuple[Optional[int], int]:
        """(tail page, n) when the first n > 0 tokens of tokens[start:limit] continue `node` in
        its tail page; (None, 0) otherwise."""
        if node.tail is None or not node.on_device:
            return None, 0
        tail_tokens, page = node.tail
        n = 0
        for a, b in zip(tail_tokens, tokens[start:limit]):
            if a != b:
                break
            n += 1
        return (page, n) if n else (None, 0)

    def copy_tail(self, page: int) -> int:
        """A private copy of a tail page for a sequence that continues writing into it."""
        new = self.allocator.alloc(1)[0]
        if self.copy_page is not None:
            self.copy_page(page, new)
        return new

    def _drop_tail(self, node: Node) -> None:
        if node.tail is not None:
            self.allocator.free([node.tail[1]])
            self.device_cached_pages -= 1
            node.tail = None

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
        """Evict device pages until `num_pages` are free; False if locked pages prevent it.
        Tail pages are never shared with a running sequence (it gets a copy), so they can go
        even from locked or inner nodes; they take their node's place in the LRU order."""
        if self.allocator.num_free >= num_pages:
            return True
        now = self.clock()

        def entry(n: Node, whole: bool):
            return (self._protected(n, now), n.last_access, int(whole), id(n)), whole, n

        heap = [entry(n, True) for n in self._nodes if self._device_leaf(n)]
        tailed = [n for n in self._nodes if n.tail is not None and not self._device_leaf(n)]
        if self.root.tail is not None:  # the root is in no node set, but its tail is evictable
            tailed.append(self.root)
        heap += [entry(n, False) for n in tailed]
        heapq.heapify(heap)
        while self.allocator.num_free < num_pages and heap:
            _, whole, node = heapq.heappop(heap)
            if node is not self.root and node not in self._nodes:
                continue
            if not whole:
                self._drop_tail(node)
                continue
            if not self._device_leaf(node):
                continue
            short = num_pages - self.allocator.num_free
            if node.num_pages > short:
                # Evict only the deepest pages: the rest of the node stays cached.
                self._split(node, node.num_pages - short)
            parent = node.parent
            self._evict_device(node, now)
            if parent is not None and parent in self._nodes and self._device_leaf(parent):
                heapq.heappush(heap, entry(parent, True))
        return self.allocator.num_free >= num_pages

    def _evict_device(self, node: Node, now: float) -> None:
        self._drop_tail(node)
        n = len(node.device_pages)
        if self.host.enabled and self._make_host_room(n, now, exclude=node):
            node.host_pages = self.host.spill(node.device_pages)
            self.host_cached_pages += n
            self.allocator.free(node.device_pages)
            self.device_cached_pages -= n
            node.device_pages = None
        else:
            self._delete_subtree(node)

    def _make_host_room(self, num_pages: int, now: float, exclude: Node) -> bool:
        if self.host.num_free >= num_pages:
            return True
        if self.host.allocator.num_pages < num_pages:
            return False
        heap = [((self._protected(n, now), n.last_access, id(n)), n) for n in self._nodes
                if self._host_leaf(n) and n is not exclude]
        heapq.heapify(heap)
        while self.host.num_free < num_pages and heap:
            _, node = heapq.heappop(heap)
            if node not in self._nodes or not self._host_leaf(node):
                continue
            short = num_pages - self.host.num_free
            if node.num_pages > short:
                self._split(node, node.num_pages - short)
            parent = node.parent
            self._delete_subtree(node)
            if parent in self._nodes and self._host_leaf(parent) and parent is not exclude:
                heapq.heappush(heap, ((self._protected(parent, now), parent.last_access, id(parent)), parent))
        return self.host.num_free >= num_pages

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

    def clear(self) -> None:
        """Drop every unlocked node (both tiers) and the root's tail (running sequences only
        ever hold copies of tails)."""
        self._drop_tail(self.root)
        for child in list(self.root.children.values()):
            self._clear_unlocked(child)

    def _clear_unlocked(self, node: Node) -> None:
        for child in list(node.children.values()):
            self._clear_unlocked(child)
        if node.lock_ref == 0 and not node.children:
            self._delete_subtree(node)

    def stats(self) -> dict:
        return {
            "device_cached_pages": self.device_cached_pages,
            "host_cached_pages": self.host_cached_pages,
            "nodes": len(self._nodes),
            "sessions_retained": len(self._sessions),
        }
