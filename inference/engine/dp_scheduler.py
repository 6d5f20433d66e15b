"""One scheduler over the KV pools of every DP-attention rank.

Each rank keeps what a single-process engine keeps (inference/engine/scheduler.py): its own
`Scheduler`, `PageAllocator`, `RadixCache` and `HostTier`, over the pages of its own cache, which
hold only its own sequences. This class places each new request on a rank (dp_placement.py),
stamps the rank on the sequence (`Sequence.dp_rank`, which the DP model runner reads), and
otherwise hands every call to the sequence's rank, so that:

- a step is every rank's own batch (its own `max_batch_tokens`, `max_running`, chunking and
  admission order), concatenated rank by rank;
- a rank that runs out of pages evicts its own cache and preempts its own youngest sequence,
  never another rank's; a preempted sequence waits and resumes on the same rank;
- prefix hits, the host tier and session retention work per rank (a shared prefix is computed
  once per rank that serves it).

The engine drives it exactly like a `Scheduler` (add, schedule, cache_prefix, grow, finish, ...).
"""

from __future__ import annotations

from typing import Optional

from inference.engine.dp_placement import Placement, RankLoad, SessionPlacer
from inference.engine.pool_stats import count_hits, new_hits, node_stats
from inference.engine.scheduler import ScheduledBatch, Scheduler
from inference.engine.sequence import Sequence


class DPScheduler:
    def __init__(self, ranks: list[Scheduler], placer: Optional[SessionPlacer] = None):
        if not ranks:
            raise ValueError("DPScheduler: at least one rank")
        self.ranks = ranks
        self.placer = placer or SessionPlacer(len(ranks), ranks[0].page_size)
        self.hits = [new_hits() for _ in ranks]  # per rank, as Engine counts them for one pool
        self.placed = [0] * len(ranks)  # requests placed on each rank since start

    # ---- placement ----
    def load(self, rank: int) -> RankLoad:
        s = self.ranks[rank]
        queued = sum(q.num_uncomputed for q in s.waiting) + sum(q.num_uncomputed for q in s.running)
        return RankLoad(queued, s.allocator.num_free)

    def add(self, seq: Sequence) -> Placement:
        placement = self.placer.place(seq.request_id, seq.session_id, [self.load(r) for r in range(len(self.ranks))])
        seq.dp_rank = placement.rank
        self.placed[placement.rank] += 1
        self.ranks[placement.rank].add(seq)
        return placement

    @property
    def placements(self) -> list[Placement]:
        return list(self.placer.records)

    # ---- the Scheduler interface the engine uses ----
    @property
    def waiting(self) -> list[Sequence]:
        return [seq for s in self.ranks for seq in s.waiting]

    @property
    def running(self) -> list[Sequence]:
        return [seq for s in self.ranks for seq in s.running]

    @property
    def num_preemptions(self) -> int:
        return sum(s.num_preemptions for s in self.ranks)

    @property
    def caches(self) -> list:
        return [s.cache for s in self.ranks]

    def has_work(self) -> bool:
        return any(s.has_work() for s in self.ranks)

    def schedule(self) -> Optional[ScheduledBatch]:
        batch = ScheduledBatch()
        for s in self.ranks:
            part = s.schedule()
            if part is not None:
                batch.items += part.items
                batch.restored_pages += part.restored_pages
        return batch if batch.items else None

    def remove(self, seq: Sequence) -> None:
        self.ranks[seq.dp_rank].remove(seq)

    def cache_prefix(self, seq: Sequence) -> None:
        self.ranks[seq.dp_rank].cache_prefix(seq)

    def grow(self, seq: Sequence, num_tokens: int) -> bool:
        return self.ranks[seq.dp_rank].grow(seq, num_tokens)

    def finish(self, seq: Sequence, reason: str) -> None:
        self.ranks[seq.dp_rank].finish(seq, reason)
        count_hits(self.hits[seq.dp_rank], seq)

    # ---- stats ----
    def stats(self) -> dict:
        """Node totals under the single engine's keys, each rank's own under "dp_ranks" (with how many
        requests were placed there), and placements by reason."""
        total, per_rank = node_stats(self.ranks, self.hits)
        for stats, placed in zip(per_rank, self.placed):
            stats["placed"] = placed
        return {**total, "placements": dict(self.placer.counts), "dp_ranks": per_rank}
