"""Radix cache, partial pages: tails spill to the host tier with their node or alone, come back
as a private copy, and pages of both tiers stay accounted for; mid-page hits on a child's page."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from .test_radix_cache import PS, Clock, check_invariants, make, put, seq


def put_with_tail(cache, alloc, tokens, session=None, ttl=0.0):
    """A finished sequence whose last page is partly filled: whole pages go in, the rest is
    attached as the node's tail."""
    n_full, partial = len(tokens) // PS, tuple(tokens[len(tokens) // PS * PS:])
    m = cache.match(tokens, n_full)
    cache.lock(m.node)
    assert cache.make_room(n_full - len(m.device_pages) + (1 if partial else 0))
    cache.restore(m)
    pages = list(m.device_pages)
    pages += alloc.alloc(n_full - len(pages))
    tail_page = alloc.alloc(1)[0] if partial else None
    node, leftover = cache.insert(tokens, pages)
    alloc.free(leftover)
    if partial:
        assert cache.attach_tail(node, partial, tail_page)
    cache.unlock(m.node)
    if session:
        cache.retain(session, node, ttl)
    return node


def host_tails(cache):
    return sum(1 for n in [cache.root, *cache._nodes] if n.tail is not None and n.tail.on_host)


def test_evicted_node_takes_its_tail_to_the_host_and_a_hit_copies_it_back():
    cache, alloc = make(device_pages=3, host_pages=8)
    a = seq(0, 10)  # 2 whole pages + a 2-token tail: every device page
    put_with_tail(cache, alloc, a)
    put(cache, alloc, seq(300, 8))  # pressure: a's pages and its tail go to the host
    assert cache.host_cached_pages == 3 and host_tails(cache) == 1
    check_invariants(cache, alloc)
    nxt = a + seq(50, 5)  # the next turn: continues all 10 tokens
    m = cache.match(nxt, 3)
    assert m.num_host_pages == 2
    hit = cache.match_tail(m.node, nxt, 8, len(nxt) - 1)
    assert hit.n == 2 and hit.tail.on_host
    cache.lock(m.node)
    assert cache.make_room(3)
    cache.restore(m)
    page, from_host = cache.take_tail(hit)
    assert from_host and cache.host.pages_restored == 3
    # The host copy of the tail stays cached: the sequence owns a copy.
    assert host_tails(cache) == 1
    check_invariants(cache, alloc, held=1)
    alloc.free([page])
    cache.unlock(m.node)
    cache.clear()
    assert alloc.num_free == 3 and cache.host.num_free == 8


def test_tail_alone_spills_from_a_locked_node():
    cache, alloc = make(device_pages=3, host_pages=4)
    a = seq(0, 10)
    node = put_with_tail(cache, alloc, a)
    m = cache.match(a, 2)
    cache.lock(m.node)
    hit = cache.match_tail(m.node, a + [99], 8, 10)
    assert not hit.tail.on_host
    assert cache.make_room(1)  # the locked pages stay; only the tail can go, to the host
    assert node.on_device and node.tail.on_host
    page, from_host = cache.take_tail(hit)  # still there, just on the other tier
    assert from_host
    alloc.free([page])
    cache.unlock(m.node)
    check_invariants(cache, alloc)


def test_full_host_tier_evicts_lru_host_tails_and_leaves():
    clock = Clock()
    cache, alloc = make(device_pages=3, host_pages=3, clock=clock)
    a, b, c = seq(0, 10), seq(200, 10), seq(400, 10)
    put_with_tail(cache, alloc, a)
    put_with_tail(cache, alloc, b)  # a (2 pages + tail) fills the host
    assert cache.host_cached_pages == 3 and cache.host.num_free == 0
    check_invariants(cache, alloc)
    put_with_tail(cache, alloc, c)  # b spills: the host drops a, tail included
    assert cache.peek(a, 2) == 0 and cache.peek(b, 2) == 2
    assert cache.host_cached_pages == 3 and host_tails(cache) == 1
    check_invariants(cache, alloc)
    # Locked host pages are never dropped for room; a locked node's tail is (it is never shared).
    m = cache.match(b, 2)
    cache.lock(m.node)
    put(cache, alloc, seq(800, 8))
    assert m.node.tail is None and cache.host.num_free == 1
    assert cache.peek(b, 2) == 2 and not m.node.on_device
    cache.unlock(m.node)
    check_invariants(cache, alloc)


def test_host_tail_of_a_protected_session_outlives_an_unprotected_branch():
    clock = Clock()
    cache, alloc = make(device_pages=3, host_pages=4, clock=clock)
    agent = seq(0, 6)  # 1 whole page + a 2-token tail
    put_with_tail(cache, alloc, agent, session="s", ttl=100.0)
    other = seq(200, 6)
    put_with_tail(cache, alloc, other)  # unprotected and more recent
    put(cache, alloc, seq(400, 12))  # both branches go to the host and fill it
    assert cache.host.num_free == 0 and host_tails(cache) == 2
    put(cache, alloc, seq(600, 8))  # 2 pages spill: the host drops the unprotected branch
    assert cache.peek(agent, 1) == 1 and cache.peek(other, 1) == 0
    m = cache.match(agent + [7], 1)
    assert cache.match_tail(m.node, agent + [7], 4, 6).tail.on_host
    check_invariants(cache, alloc)


def test_a_next_turn_that_covers_the_tail_drops_it():
    cache, alloc = make(device_pages=8, host_pages=4)
    turn1 = seq(0, 6)
    node = put_with_tail(cache, alloc, turn1)
    assert node.tail is not None
    put(cache, alloc, turn1 + seq(50, 6))  # its whole page holds the tail's tokens
    assert node.tail is None and cache.device_cached_pages == 3
    put_with_tail(cache, alloc, seq(0, 4) + seq(70, 3))  # a tail on a node with other children
    branch = cache.match(seq(0, 4), 1).node
    assert branch.tail is not None and branch.tail.tokens == (70, 71, 72)
    assert not cache.attach_tail(branch, (4, 5), 0)  # a child's first page already holds (4, 5)
    check_invariants(cache, alloc)


def test_mid_page_hit_on_a_childs_first_page_on_either_tier():
    cache, alloc = make(device_pages=4, host_pages=4)
    a = seq(0, 12)
    put(cache, alloc, a)
    fork = a[:6] + [99, 98]  # shares 1 whole page and 2 tokens of the second
    m = cache.match(fork, 1)
    hit = cache.match_tail(m.node, fork, 4, len(fork) - 1)
    assert hit.n == 2 and hit.tail is None
    cache.lock(m.node)
    assert cache.make_room(1)
    page, from_host = cache.take_tail(hit)
    assert not from_host and page not in m.node.device_pages
    alloc.free([page])
    cache.unlock(m.node)
    put(cache, alloc, seq(500, 16))  # a goes to the host
    m = cache.match(fork, 1)
    hit = cache.match_tail(m.node, fork, 4, len(fork) - 1)
    assert hit.n == 2 and m.num_host_pages == 1
    cache.lock(m.node)
    assert cache.make_room(2)
    cache.restore(m)
    page, from_host = cache.take_tail(hit)
    assert from_host  # the child stayed on the host: copied from there
    alloc.free([page])
    cache.unlock(m.node)
    check_invariants(cache, alloc)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 5), st.integers(1, 5), st.integers(0, 3), st.booleans(), st.integers(0, 3)),
                min_size=1, max_size=40))
def test_random_workload_with_tails_conserves_pages_on_both_tiers(ops):
    clock = Clock()
    cache, alloc = make(device_pages=10, host_pages=5, clock=clock)
    for family, n_pages, extra, retain, advance in ops:
        tokens = seq(family * 1000, 2 * PS) + seq(family * 1000 + 500 + n_pages, n_pages * PS + extra)
        tokens = tokens[: min(len(tokens), 9 * PS + extra)]
        m = cache.match(tokens, len(tokens) // PS)
        hit = cache.match_tail(m.node, tokens, (len(m.device_pages) + m.num_host_pages) * PS, len(tokens))
        if hit is not None:  # what admission does with a tail hit
            cache.lock(m.node)
            if cache.make_room(m.num_host_pages + 1):
                cache.restore(m)
                taken = cache.take_tail(hit)
                if taken is not None:
                    alloc.free([taken[0]])
            cache.unlock(m.node)
        put_with_tail(cache, alloc, tokens, session=f"s{family}" if retain else None, ttl=3.0)
        clock.t += advance
        check_invariants(cache, alloc)
    cache.clear()
    assert alloc.num_free == 10 and cache.host.num_free == 5
