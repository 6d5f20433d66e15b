"""Radix cache: page-granular matching, splitting, locking, LRU + session retention, host tier."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from inference.engine.host_tier import HostTier
from inference.engine.page_allocator import PageAllocator
from inference.engine.radix_cache import RadixCache

PS = 4


class Clock:
    def __init__(self):
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


def make(device_pages=16, host_pages=0, clock=None):
    alloc = PageAllocator(device_pages)
    cache = RadixCache(PS, alloc, HostTier(host_pages), clock=clock or Clock())
    return cache, alloc


def put(cache, alloc, tokens, session=None, ttl=0.0):
    """What a finished sequence does: match, own private pages for the rest, insert, release."""
    n_pages = len(tokens) // PS
    m = cache.match(tokens, n_pages)
    cache.lock(m.node)
    assert cache.make_room(n_pages - len(m.device_pages))  # host part + new pages
    cache.restore(m)
    pages = list(m.device_pages)
    pages += alloc.alloc(n_pages - len(pages))
    node, leftover = cache.insert(tokens, pages)
    alloc.free(leftover)
    cache.unlock(m.node)
    if session:
        cache.retain(session, node, ttl)
    return node


def check_invariants(cache, alloc, held=0):
    assert alloc.num_free + cache.device_cached_pages + held == alloc.num_pages
    assert cache.host.num_free + cache.host_cached_pages == cache.host.allocator.num_pages
    for node in cache._nodes:
        if node.on_device:
            assert node.parent is cache.root or node.parent.on_device, "device node below a host node"
        assert len(node.key) == node.num_pages * PS
    for node in [cache.root, *cache._nodes]:
        if node.tail is not None:
            assert node.tail.on_host or node.on_device, "device tail on a host node"
            assert 0 < len(node.tail.tokens) < PS
            assert not any(k[:len(node.tail.tokens)] == node.tail.tokens for k in node.children), "covered tail"


def seq(base, n):
    return [base + i for i in range(n)]


def test_match_whole_pages_and_split():
    cache, alloc = make()
    a = seq(100, 12)  # 3 pages
    put(cache, alloc, a)
    assert cache.peek(a, 3) == 3
    # Shares 6 tokens = 1 whole page + half a page: only the whole page matches.
    b = a[:6] + seq(900, 6)
    m = cache.match(b, 3)
    assert len(m.device_pages) == 1 and not m.host_nodes
    put(cache, alloc, b)
    assert cache.device_cached_pages == 5  # 3 of a + 2 new of b, first page shared
    check_invariants(cache, alloc)


def test_duplicate_insert_returns_private_pages():
    cache, alloc = make()
    a = seq(0, 8)
    put(cache, alloc, a)
    mine = alloc.alloc(2)
    _, leftover = cache.insert(a, mine)
    assert leftover == mine  # already cached under other pages: the caller frees its copies
    alloc.free(leftover)
    check_invariants(cache, alloc)


def test_locked_paths_are_not_evicted():
    cache, alloc = make(device_pages=4)
    a = seq(0, 8)
    put(cache, alloc, a)
    m = cache.match(a, 2)
    cache.lock(m.node)
    assert not cache.make_room(3)
    cache.unlock(m.node)
    assert cache.make_room(4)
    assert cache.device_cached_pages == 0


def test_lru_evicts_least_recent_leaf_first():
    cache, alloc = make(device_pages=4)
    a, b = seq(0, 4), seq(50, 4)
    put(cache, alloc, a)
    put(cache, alloc, b)
    cache.match(a, 1)  # touch a: b is now least recently used
    put(cache, alloc, seq(200, 12))  # needs 3 pages, 2 free: one eviction
    assert cache.peek(a, 1) == 1 and cache.peek(b, 1) == 0
    check_invariants(cache, alloc)


def test_session_retention_protects_until_ttl():
    clock = Clock()
    cache, alloc = make(device_pages=4, clock=clock)
    agent = seq(0, 8)
    put(cache, alloc, agent, session="s1", ttl=10.0)
    other = seq(500, 8)
    put(cache, alloc, other)
    cache.match(other, 2)  # `other` is more recent, but unprotected
    put(cache, alloc, seq(900, 8))  # needs 2 of the 4 pages
    assert cache.peek(agent, 2) == 2, "retained session evicted before an unprotected branch"
    assert cache.peek(other, 2) == 0
    clock.t = 11.0  # tool ran too long: protection expired, plain LRU applies
    put(cache, alloc, seq(1300, 8))
    assert cache.peek(agent, 2) == 0
    check_invariants(cache, alloc)


def test_next_turn_moves_session_protection():
    clock = Clock()
    cache, alloc = make(device_pages=8, clock=clock)
    turn1 = seq(0, 8)
    put(cache, alloc, turn1, session="s", ttl=5.0)
    branch = turn1[:4] + seq(70, 4)  # the session went another way
    put(cache, alloc, branch, session="s", ttl=5.0)
    old_tail = cache.match(turn1, 2).node
    assert not cache.is_protected(old_tail)
    assert cache.is_protected(cache.match(branch, 2).node)


def test_host_tier_spill_and_restore():
    cache, alloc = make(device_pages=2, host_pages=4)
    a, b = seq(0, 8), seq(300, 8)
    put(cache, alloc, a)
    put(cache, alloc, b)  # evicts a to host
    assert cache.host_cached_pages == 2 and cache.device_cached_pages == 2
    m = cache.match(a, 2)
    assert m.device_pages == [] and m.num_host_pages == 2
    cache.lock(m.node)
    assert cache.make_room(2)  # spills b
    cache.restore(m)
    cache.unlock(m.node)
    assert len(m.device_pages) == 2 and cache.host.pages_restored == 2
    assert cache.peek(b, 2) == 2 and cache.host_cached_pages == 2
    check_invariants(cache, alloc)


def test_host_tier_full_drops_lru_host_leaves():
    cache, alloc = make(device_pages=2, host_pages=2)
    for base in (0, 100, 200):
        put(cache, alloc, seq(base, 8))
    assert cache.peek(seq(0, 8), 2) == 0  # spilled, then dropped when 100 was spilled
    assert cache.peek(seq(100, 8), 2) == 2  # on host
    check_invariants(cache, alloc)


def test_shared_prefix_stays_resident_under_churn():
    clock = Clock()
    cache, alloc = make(device_pages=12, clock=clock)
    system = seq(10_000, 8)  # 2 pages shared by every session
    for turn in range(30):
        sid = f"s{turn % 5}"
        put(cache, alloc, system + seq(turn * 100, 8), session=sid, ttl=1.0)
        clock.t += 2.0  # every retention has expired by the next turn
        assert cache.peek(system, 2) == 2
    check_invariants(cache, alloc)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 5), st.integers(1, 5), st.booleans(), st.integers(0, 3)), min_size=1, max_size=40))
def test_random_workload_conserves_pages(ops):
    clock = Clock()
    cache, alloc = make(device_pages=10, host_pages=6, clock=clock)
    for family, n_pages, retain, advance in ops:
        tokens = seq(family * 1000, 2 * PS) + seq(family * 1000 + 500 + n_pages, (n_pages) * PS)
        put(cache, alloc, tokens[: min(len(tokens), 10 * PS)], session=f"s{family}" if retain else None, ttl=3.0)
        clock.t += advance
        check_invariants(cache, alloc)
    cache.clear()
    assert alloc.num_free == 10 and cache.host.num_free == 6


def test_partial_tail_page_is_reused_and_freed_with_its_node():
    cache, alloc = make(device_pages=4, host_pages=4)
    a = seq(0, 8)
    node = put(cache, alloc, a)
    tail_page = alloc.alloc(1)[0]
    assert cache.attach_tail(node, (8, 9, 10), tail_page)
    check_invariants(cache, alloc)
    m = cache.match(a + [8, 9, 77, 78], 3)
    hit = cache.match_tail(m.node, a + [8, 9, 77, 78], 8, 11)
    assert hit.n == 2 and hit.tail.page == tail_page and not hit.tail.on_host  # any common prefix
    assert cache.match_tail(m.node, a + [8, 9, 10], 8, 10).n == 2  # the last token is computed
    assert cache.match_tail(m.node, a + [5, 9, 10], 8, 10) is None
    copy, from_host = cache.take_tail(hit)
    assert copy != tail_page and not from_host
    alloc.free([copy])
    assert cache.make_room(4)  # the node goes to the host, its tail with it
    assert cache.host_cached_pages == 3 and alloc.num_free == 4
    check_invariants(cache, alloc)


def test_prompt_shorter_than_a_page_keeps_its_tail_on_the_root():
    cache, alloc = make(device_pages=4)
    node, leftover = cache.insert([1, 2, 3], [])  # no whole page: the path ends at the root
    assert node is cache.root and leftover == []
    page = alloc.alloc(1)[0]
    assert cache.attach_tail(node, (1, 2, 3), page)
    check_invariants(cache, alloc)
    m = cache.match([1, 2, 3], 0)
    assert m.node is cache.root
    hit = cache.match_tail(m.node, [1, 2, 3], 0, 2)
    assert hit.n == 2 and hit.tail.page == page
    assert cache.make_room(4)  # evictable like any other tail
    assert cache.root.tail is None and alloc.num_free == 4
    assert cache.attach_tail(cache.root, (1, 2), alloc.alloc(1)[0])
    cache.clear()
    assert cache.root.tail is None and alloc.num_free == 4
    check_invariants(cache, alloc)
