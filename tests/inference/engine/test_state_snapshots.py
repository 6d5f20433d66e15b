"""Recurrent-state snapshots on the radix cache (state_snapshots.py), through the real scheduler and
cache without a model. The model side is `HistoryStore`: a recurrent model whose state is the
tuple of tokens it has absorbed, so every load proves the snapshot holds exactly the state after
the sequence's own prefix, and every step proves a sequence is fed only where its state stands."""

from __future__ import annotations

import random

import pytest

from inference.engine.engine_config import EngineConfig
from inference.engine.host_tier import HostTier
from inference.engine.page_allocator import PageAllocator
from inference.engine.radix_cache import RadixCache
from inference.engine.sampling_params import SamplingParams
from inference.engine.scheduler import Scheduler
from inference.engine.sequence import Sequence, Status
from inference.engine.state_snapshots import StateSnapshots, _depth, split_budget

from .test_radix_cache import Clock

PS = 4


class HistoryStore:
    def __init__(self):
        self.running: dict[int, tuple] = {}
        self.device: dict[int, tuple] = {}
        self.host: dict[int, tuple] = {}
        self.loads = 0

    def save_state(self, seq, slot, position):
        state = self.running.get(id(seq))
        if state is None or len(state) != position:
            return False
        self.device[slot] = state
        return True

    def load_state(self, seq, slot, on_host, position):
        state = (self.host if on_host else self.device)[slot]
        assert state == tuple(seq.tokens[:position]), "loaded a snapshot of another prefix"
        self.running[id(seq)] = state
        self.loads += 1

    def spill_state(self, slot, host_slot):
        self.host[host_slot] = self.device[slot]


class Rig:
    def __init__(self, pages=24, host_pages=0, snapshots=3, host_snapshots=0, **cfg):
        self.clock = Clock()
        config = EngineConfig(kv_budget_tokens=pages * PS, page_size=PS, host_budget_tokens=host_pages * PS, **cfg)
        self.alloc = PageAllocator(pages)
        self.store = HistoryStore()
        self.states = StateSnapshots(snapshots, host_snapshots, self.store, host_load_pages=1)
        self.cache = RadixCache(PS, self.alloc, HostTier(host_pages), clock=self.clock, states=self.states)
        self.sched = Scheduler(config, self.cache, self.alloc)

    def submit(self, tokens, n=3, name="r", session=None) -> Sequence:
        seq = Sequence(name, list(tokens), SamplingParams(max_tokens=n), session_id=session)
        seq.script = [9000 + len(tokens) + i for i in range(n)]  # the "model's" outputs
        self.sched.add(seq)
        return seq

    def step(self):
        """What the engine does around a forward; the store checks each row starts where its state is."""
        batch = self.sched.schedule()
        for it in batch.items:
            seq = it.seq
            if it.start == 0:
                self.store.running[id(seq)] = ()
            assert self.store.running.get(id(seq)) == tuple(seq.tokens[:it.start]), "fed where its state is not"
            seq.num_computed = it.start + len(it.token_ids)
            self.store.running[id(seq)] = tuple(seq.tokens[:seq.num_computed])
            done = False
            if it.num_logits:
                seq.tokens.append(seq.script[seq.num_output])
                done = seq.num_output >= seq.params.max_tokens
            if it.num_logits <= 1 and not done:
                self.sched.cache_prefix(seq)
            if done:
                self.sched.finish(seq, "length")
        check(self)
        return batch

    def run(self, *seqs):
        while any(s.status is not Status.FINISHED for s in seqs):
            self.step()


def check(rig: Rig) -> None:
    cache, states = rig.cache, rig.states
    held = sum(len(s.pages) - s.num_tree_pages for s in rig.sched.running)
    assert rig.alloc.num_free + cache.device_cached_pages + held == rig.alloc.num_pages
    snaps = list(states._snaps.values())
    assert states.device.num_free + sum(not s.on_host for s in snaps) == states.device.num_pages
    assert states.host.num_free + sum(s.on_host for s in snaps) == states.host.num_pages
    nodes = [cache.root, *cache._nodes]
    for s in snaps:
        assert s.node is cache.root or s.node in cache._nodes, "snapshot on a node that left the tree"
        if s.carrier is s.node:
            assert s.position == _depth(s.node) and (s.on_host or s.node.on_device)
        else:
            assert s.node.tail is s.carrier, "snapshot on a tail that left its node"
            assert s.position == _depth(s.node) + len(s.carrier.tokens) and (s.on_host or not s.carrier.on_host)
        assert len((rig.store.host if s.on_host else rig.store.device)[s.slot]) == s.position
    for node in nodes:
        if node.tail is not None:
            assert node.tail in states._snaps, "a tail without a snapshot serves no hit"
        if node is not cache.root and node.lock_ref == 0 and not node.children and node not in states._snaps:
            assert node.tail is not None or node in states._suspects, "unlocked leaf no snapshot backs"
    assert states._pinned is None


def test_split_budget_counts_snapshots_in_the_same_bytes():
    assert split_budget(1000, kv_bytes_per_token=10, state_bytes=1500, fraction=0.5) == (550, 3)
    assert split_budget(1000, kv_bytes_per_token=10, state_bytes=1500, fraction=0.0) == (1000, 0)


def test_next_turn_resumes_where_the_last_one_stopped():
    rig = Rig()
    a = rig.submit(range(100, 110), n=3, session="s")  # 10 prompt tokens: ends mid-page
    rig.run(a)
    assert rig.states.counts["taken"] == 1 and a.cached_device == 0
    turn2 = rig.submit(a.tokens + [7, 8, 9], n=2, session="s")
    rig.run(turn2)
    # Every token of turn 1 with a state (all but its last output) is a hit: 2 pages + the tail.
    assert turn2.cached_device == len(a.tokens) - 1 == 12
    assert rig.store.loads == 1


def test_shared_prefix_gets_a_snapshot_from_its_second_user():
    rig = Rig(pages=40, snapshots=4)
    system = list(range(500, 511))  # 2 whole pages + 3
    first = rig.submit(system + [1, 2, 3, 4, 5], n=2)
    rig.run(first)
    second = rig.submit(system + [6, 6, 6], n=2)
    rig.step()
    # No snapshot at the 2 shared pages: recompute from 0, but this chunk stops at the boundary.
    assert second.cached_device == 0 and second.num_computed == 8
    assert rig.states.counts["taken_shared"] == 1
    rig.run(second)
    third = rig.submit(system + [7, 7, 7, 7], n=2)
    rig.run(third)
    assert third.cached_device == 8


def test_preempted_sequence_resumes_from_its_snapshot():
    rig = Rig(pages=8, snapshots=3, max_batch_tokens=8, chunk_size=8)
    old = rig.submit(range(200, 212), n=12, name="old")
    young = rig.submit(range(300, 312), n=12, name="young")
    for _ in range(12):
        rig.step()
    assert rig.sched.num_preemptions > 0 and young.num_preemptions > 0
    rig.run(old, young)
    assert rig.store.loads >= 1  # the victim came back through its snapshot, not from token 0
    assert young.tokens == list(range(300, 312)) + young.script


def test_dropped_snapshot_cuts_hits_back_and_prunes_pages_nothing_can_use():
    rig = Rig(pages=40, snapshots=1)
    a = rig.submit(range(100, 112), n=1)  # finishes at 12 tokens computed: a page boundary
    rig.run(a)
    pages_a = rig.cache.device_cached_pages
    b = rig.submit(range(600, 612), n=1)  # its snapshot takes the only slot: a's is dropped
    rig.run(b)
    assert rig.states.counts["dropped"] == 1
    assert rig.cache.device_cached_pages == pages_a, "a's pages went with its snapshot"
    c = rig.submit(list(range(100, 112)) + [1, 2], n=1)
    rig.run(c)
    assert c.cached_device == 0


def test_snapshots_spill_to_the_host_and_resume_from_there():
    rig = Rig(pages=40, snapshots=1, host_snapshots=2, host_pages=8)
    a = rig.submit(range(100, 110), n=3, session="a")
    rig.run(a)
    b = rig.submit(range(700, 710), n=3, session="b")  # a's snapshot moves to the host pool
    rig.run(b)
    assert rig.states.counts["spilled"] == 1
    a2 = rig.submit(a.tokens + [1, 2, 3], n=2, session="a")
    rig.run(a2)
    assert rig.states.counts["resumed_from_host"] == 1 and a2.cached_device == len(a.tokens) - 1


def test_eviction_spills_pages_and_their_snapshots_together():
    rig = Rig(pages=6, snapshots=2, host_snapshots=2, host_pages=12)
    a = rig.submit(range(100, 116), n=1, session="a")  # 16 tokens: 4 pages, snapshot at the end
    rig.run(a)
    b = rig.submit(range(800, 816), n=1)  # needs a's pages: they spill, and its snapshot with them
    rig.run(b)
    assert rig.cache.host_cached_pages > 0
    assert any(s.on_host for s in rig.states._snaps.values())
    a2 = rig.submit(list(range(100, 117)) + [5], n=1, session="a")
    rig.run(a2)
    assert a2.cached_host > 0 and a2.cached_device + a2.cached_host == 16  # the spilled deeper half from the host


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_random_agent_workload_keeps_every_invariant_and_returns_every_slot(seed):
    rng = random.Random(seed)
    rig = Rig(pages=20, host_pages=10, snapshots=3, host_snapshots=2, max_running=3, chunk_size=5,
              max_batch_tokens=11, session_ttl_s=5.0)
    systems = [list(range(1000 * g, 1000 * g + rng.randrange(3, 11))) for g in range(2)]
    history = {s: systems[s % 2] + [50000 + 100 * s + i for i in range(rng.randrange(1, 6))] for s in range(5)}
    live: dict[int, Sequence] = {}
    turns = 0
    while turns < 60 or live:
        for s in range(5):
            if s not in live and turns < 60 and rng.random() < 0.5 and len(history[s]) < 40:
                live[s] = rig.submit(history[s], n=rng.randrange(1, 4), name=f"{s}:{turns}", session=f"s{s}")
                turns += 1
        if live and rng.random() < 0.05:
            victim = rng.choice(list(live.values()))
            rig.sched.finish(victim, "abort")
            check(rig)
        if rig.sched.has_work():
            rig.step()
        rig.clock.t += rng.random()
        for s, seq in list(live.items()):
            if seq.status is Status.FINISHED:
                del live[s]
                history[s] = seq.tokens + [60000 + rng.randrange(1000) for _ in range(rng.randrange(1, 5))]
                if len(history[s]) >= 40:
                    history[s] = systems[s % 2] + [70000 + rng.randrange(1000)]
    assert rig.store.loads > 0
    rig.cache.clear()
    assert rig.alloc.num_free == rig.alloc.num_pages and rig.cache.host.num_free == rig.cache.host.allocator.num_pages
    assert rig.states.device.num_free == 3 and rig.states.host.num_free == 2 and not rig.states._snaps
