"""Recurrent-state snapshots attached to the radix cache, for hybrid models (GLM-5.3-Flash's KDA layers).

A prefix hit on a model with recurrent layers needs two things at the matched position: the KV
pages of its attention layers and the recurrent state after exactly those tokens. Pages serve any
shorter prefix too; a state serves only its own position. So the tree keeps *snapshots* of the
state at a few positions along its cached paths, on a *carrier*:
- a node (the state after the node's last page: a page boundary), or
- a node's tail (the state after the tail's tokens: where a finished turn stopped, mid-page).

Where snapshots are taken (`keep`, `reached`):
- wherever a sequence leaves the running set: at the end of every finished turn (so the session's
  next turn resumes without recomputing anything), when it is preempted (it resumes there) and
  when it is aborted;
- at a shared prefix: when a match finds pages deeper than its deepest snapshot (someone else
  computed that prefix), the request recomputes from the snapshot, its prefill chunk stops at the
  end of the matched pages and the state there is saved, so later requests sharing it hit.

A match is cut back to the deepest snapshot on its path (`plan`); the pages after it are
recomputed into private pages (and then swapped for the tree's, as any duplicate insert is).
Snapshots live in their own two-tier slot pool (their own budget, derived from the same KV and
host budgets: `split_budget`), evicted least recently *used* first, superseded ones (an earlier
turn's end on a path that has moved on: a deeper snapshot before the path branches) before the
rest and a session's latest turn end last while its TTL runs; a device snapshot under pressure
moves to the host pool, a host one is dropped.

NOTE invariants (checked by the tests after every operation):
- a snapshot's position is its carrier's end; its carrier is in the tree. A snapshot never sits
  on a higher tier than its carrier (a host node or host tail holds no device snapshot):
  spilling a carrier spills its snapshot (or drops it when the host pool has no room).
- every unlocked leaf, and every tail, carries a snapshot or is on its way out: without one its
  pages can serve no hit (a hit needs the state), so `settle` prunes it (after eviction and after
  every release). Inner nodes without one stay: deeper snapshots need their pages.
- the snapshot a planned admission resumes from is pinned until it is loaded: neither snapshot
  eviction nor page eviction (of its tail) may take it.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Any, Optional, Protocol

from inference.engine.page_allocator import PageAllocator
from inference.engine.radix_node import Match, Node, Tail, TailHit


class StateStore(Protocol):
    """The model side: copies between running sequences' state slots and the snapshot pools."""

    def save_state(self, seq: Any, slot: int, position: int) -> bool:
        """seq's running state -> device snapshot `slot`; False when it is not at `position`."""

    def load_state(self, seq: Any, slot: int, on_host: bool, position: int) -> None:
        """A device or host snapshot -> seq's running state, which then stands at `position`."""

    def spill_state(self, slot: int, host_slot: int) -> None:
        """Device snapshot -> host snapshot."""


class Snapshot:
    __slots__ = ("slot", "on_host", "position", "node", "carrier", "last_use")

    def __init__(self, slot: int, position: int, node: Node, carrier: Node | Tail, last_use: int):
        self.slot = slot
        self.on_host = False
        self.position = position  # tokens the state has absorbed (= its carrier's end)
        self.node = node  # the carrier, or the node holding the carrier tail
        self.carrier = carrier
        self.last_use = last_use


@dataclass
class ResumePlan:
    """A match cut back to where a snapshot lets the request resume. `snapshot_at`: a page boundary
    past the resume point where the tree has pages but no state: the request saves one there."""

    match: Match
    tail: Optional[TailHit]
    snapshot: Optional[Snapshot] = None
    snapshot_at: Optional[int] = None


def split_budget(tokens: int, kv_bytes_per_token: int, state_bytes: int, fraction: float) -> tuple[int, int]:
    """A budget of `tokens` (KV tokens' worth of bytes) -> (tokens left for pages, snapshots) when
    `fraction` of its bytes hold snapshots of `state_bytes` each."""
    snapshots = int(fraction * tokens * kv_bytes_per_token) // max(1, state_bytes)
    return tokens - -(-snapshots * state_bytes // max(1, kv_bytes_per_token)), snapshots


class NoStateSnapshots:
    """The attachment of a cache whose model has no recurrent state (GLM-5.x): every hook is a
    no-op, so the radix cache and scheduler behave exactly as without the attachment."""

    def attach(self, cache) -> None:
        self.cache = cache

    def plan(self, match: Match, tail: Optional[TailHit]) -> ResumePlan:
        return ResumePlan(match, tail)

    def resume(self, seq, plan: ResumePlan) -> int:
        return 0

    def abandon(self, plan: ResumePlan) -> None:
        pass

    def reached(self, seq, node: Node) -> None:
        pass

    def keep(self, seq, node: Node, tail: Optional[Tail], unlocked: Optional[Node]) -> Node:
        return node

    def forget(self, node: Node) -> None:
        pass

    def forget_tail(self, node: Node, tail: Tail) -> None:
        pass

    def spilled(self, carrier: Node | Tail) -> None:
        pass

    def pinned(self, tail: Optional[Tail]) -> bool:
        return False

    def settle(self) -> None:
        pass

    def stats(self) -> dict:
        return {}


class StateSnapshots(NoStateSnapshots):

    def __init__(self, device_slots: int, host_slots: int = 0, store: Optional[StateStore] = None,
                 host_load_pages: int = 0):
        """host_load_pages: what loading one host snapshot costs in pages' worth of copied bytes
        (added to a step's restored pages, as the cost model counts host restores)."""
        if device_slots < 1:
            raise ValueError(f"device_slots={device_slots}: expected at least one snapshot slot")
        self.device = PageAllocator(device_slots)
        self.host = PageAllocator(host_slots)
        self.store = store
        self.host_load_pages = host_load_pages
        self._snaps: dict[Node | Tail, Snapshot] = {}
        self._suspects: set[Node] = set()  # nodes that may have lost their last use (see settle)
        self._pinned: Optional[Snapshot] = None
        self._uses = itertools.count(1)
        self.counts = dict(taken=0, taken_shared=0, resumed=0, resumed_from_host=0, spilled=0, dropped=0,
                           refused=0)

    # ---- admission -------------------------------------------------------------------------
    def plan(self, match: Match, tail: Optional[TailHit]) -> ResumePlan:
        """Cut a (locked) match and its tail hit back to the deepest snapshot on the path."""
        snap = None
        if tail is not None and tail.tail is not None and tail.n == len(tail.tail.tokens):
            snap = self._snaps.get(tail.tail)  # NOTE: only a whole own tail: its snapshot is at its end
        cut = match.node
        if snap is None:
            tail = None
            cut = next((n for n in match.node.path() if n in self._snaps), self.cache.root)
            snap = self._snaps.get(cut)
        depth = _depth(cut)
        pages = depth // self.cache.page_size
        kept = Match(cut, match.device_pages[:pages], [])
        have = len(kept.device_pages)
        for node in match.host_nodes:
            if have >= pages:
                break
            kept.host_nodes.append(node)
            have += node.num_pages
        position = depth + (len(tail.tail.tokens) if tail is not None else 0)
        assert snap is None or snap.position == position, "snapshot position differs from its carrier's end"
        full = _depth(match.node)
        self._pinned = snap
        return ResumePlan(kept, tail, snap, full if full > position else None)

    def resume(self, seq, plan: ResumePlan) -> int:
        """The admitted sequence (num_computed set to the plan's position) loads the planned
        snapshot into its running state. Returns the pages' worth of bytes copied from the host."""
        snap, self._pinned = plan.snapshot, None
        seq.snapshot_at = plan.snapshot_at
        if snap is None:
            return 0
        assert self._snaps.get(snap.carrier) is snap and snap.position == seq.num_computed
        if self.store is not None:
            self.store.load_state(seq, snap.slot, snap.on_host, snap.position)
        snap.last_use = next(self._uses)
        self.counts["resumed"] += 1
        self.counts["resumed_from_host"] += snap.on_host
        return self.host_load_pages if snap.on_host else 0

    def abandon(self, plan: ResumePlan) -> None:
        self._pinned = None

    def pinned(self, tail: Optional[Tail]) -> bool:
        return self._pinned is not None and tail is not None and self._pinned.carrier is tail

    # ---- taking snapshots --------------------------------------------------------------------
    def reached(self, seq, node: Node) -> None:
        """After a prefill chunk (the sequence's pages are in the tree up to `node`): save the
        state at the planned shared-prefix boundary when the chunk ended there."""
        at = seq.snapshot_at
        if at is None or seq.num_computed < at:
            return
        seq.snapshot_at = None
        if seq.num_computed == at and _depth(node) == at and node not in self._snaps:
            if self._take(seq, node, node, evict_retained=False):
                self.counts["taken_shared"] += 1
            self.settle()  # room for it may have cost another snapshot

    def keep(self, seq, node: Node, tail: Optional[Tail], unlocked: Optional[Node]) -> Node:
        """A sequence leaves the running set (finished, preempted or aborted) with its pages
        inserted up to `node` and its partial last page kept as `tail` (or None). Save its state
        there; then prune what no snapshot backs. Returns the node a session may retain (the root
        when `node` was pruned)."""
        seq.snapshot_at = None
        position = seq.num_computed
        carrier = tail
        if carrier is None and position > 0 and node is not self.cache.root and _depth(node) == position:
            carrier = node
        if carrier is not None:
            have = self._snaps.get(carrier)
            if have is not None and have.position == position:
                have.last_use = next(self._uses)
            else:
                self._take(seq, node, carrier)
        self._suspects.add(node)
        if unlocked is not None:
            self._suspects.add(unlocked)
        self.settle()
        return node if node is self.cache.root or node in self.cache._nodes else self.cache.root

    def _take(self, seq, node: Node, carrier: Node | Tail, evict_retained: bool = True) -> bool:
        """evict_retained=False: only a free slot or one whose snapshot no live session retains
        (a shared prefix is worth less than a session's whole context)."""
        slot = self._device_slot(evict_retained)
        if slot is None:
            return False
        if self.store is not None and not self.store.save_state(seq, slot, seq.num_computed):
            self.device.free([slot])
            self.counts["refused"] += 1
            return False
        old = self._snaps.pop(carrier, None)
        if old is not None:
            self._free(old)
        self._snaps[carrier] = Snapshot(slot, seq.num_computed, node, carrier, next(self._uses))
        self.counts["taken"] += 1
        return True

    # ---- the snapshot pools ------------------------------------------------------------------
    def _device_slot(self, evict_retained: bool = True) -> Optional[int]:
        if self.device.num_free == 0:
            victim = self._lru(on_host=False)
            if victim is None or (not evict_retained and self._retained(victim)):
                return None
            self._to_host(victim)
        return self.device.alloc(1)[0]

    def _host_slot(self) -> Optional[int]:
        if self.host.num_pages == 0:
            return None
        if self.host.num_free == 0:
            victim = self._lru(on_host=True)
            if victim is None:
                return None
            self._drop(victim)
        return self.host.alloc(1)[0]

    def _lru(self, on_host: bool) -> Optional[Snapshot]:
        """The tier's snapshot to evict: superseded ones first, a retained session's latest turn
        end last, least recently used first within each class."""
        candidates = [s for s in self._snaps.values() if s.on_host == on_host and s is not self._pinned]
        return min(candidates, key=lambda s: (self._retained(s), not self._superseded(s), s.last_use), default=None)

    def _retained(self, snap: Snapshot) -> bool:
        """The end of a session's latest turn, inside the session's TTL."""
        now, sessions = self.cache.clock(), self.cache._sessions
        return any(t > now and sessions.get(sid) is snap.node for sid, t in snap.node.sessions.items())

    def _superseded(self, snap: Snapshot) -> bool:
        """A node's snapshot with a deeper one below it before the path branches (a session's
        earlier turn end on a path that has moved on): only a request leaving the path between
        the two needs it."""
        node = snap.node if snap.carrier is snap.node else None
        while node is not None and len(node.children) == 1:
            (node,) = node.children.values()
            if node in self._snaps or (node.tail is not None and node.tail in self._snaps):
                return True
        return False

    def _to_host(self, snap: Snapshot) -> None:
        """Move a device snapshot to the host pool (dropping the host's LRU one for room), or drop it."""
        host_slot = self._host_slot()
        if host_slot is None:
            self._drop(snap)
            return
        if self.store is not None:
            self.store.spill_state(snap.slot, host_slot)
        self.device.free([snap.slot])
        snap.slot, snap.on_host = host_slot, True
        self.counts["spilled"] += 1

    def _drop(self, snap: Snapshot) -> None:
        del self._snaps[snap.carrier]
        self._free(snap)
        self._suspects.add(snap.node)
        self.counts["dropped"] += 1

    def _free(self, snap: Snapshot) -> None:
        (self.host if snap.on_host else self.device).free([snap.slot])

    # ---- radix events -----------------------------------------------------------------------
    def forget(self, node: Node) -> None:
        """`node` left the tree (its tail went first)."""
        snap = self._snaps.pop(node, None)
        if snap is not None:
            self._free(snap)
        self._suspects.add(node.parent)

    def forget_tail(self, node: Node, tail: Tail) -> None:
        assert not self.pinned(tail), "the tail a planned admission resumes from was dropped"
        snap = self._snaps.pop(tail, None)
        if snap is not None:
            self._free(snap)
        self._suspects.add(node)

    def spilled(self, carrier: Node | Tail) -> None:
        """A node or tail moved to the host tier: its snapshot follows it."""
        snap = self._snaps.get(carrier)
        if snap is not None and not snap.on_host:
            self._to_host(snap)

    def settle(self) -> None:
        """Prune what lost its last use: tails without a snapshot, and unlocked leaves without a
        snapshot or tail, upward. Locked nodes wait for a later call."""
        root, waiting = self.cache.root, []
        while self._suspects:
            node = self._suspects.pop()
            if node is not root and node not in self.cache._nodes:
                continue
            if node.tail is not None and node.tail not in self._snaps and not self.pinned(node.tail):
                self.cache._drop_tail(node)
            if node is root:
                continue
            if node.lock_ref > 0:
                waiting.append(node)
            elif not node.children and node.tail is None and node not in self._snaps:
                self.cache._delete_subtree(node)  # forget() makes its parent a suspect
        self._suspects.update(waiting)

    def stats(self) -> dict:
        host = [s for s in self._snaps.values() if s.on_host]
        return {"state_snapshots": {
            "device_slots": self.device.num_pages, "host_slots": self.host.num_pages,
            "device": len(self._snaps) - len(host), "host": len(host), **self.counts,
        }}


def _depth(node: Node) -> int:
    return sum(len(n.key) for n in node.path())
