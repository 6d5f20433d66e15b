"""Which DP-attention rank a new request goes to, and the record of every choice.

Under DP attention a sequence's KV pages, prefix cache, retention and host tier live on one rank,
so where a request lands decides whether its prefix hits. Rules, in order:

1. affinity: a request of a session seen before goes to that session's rank, whatever the load
   (its earlier turns' pages, retention and host-tier copies are there);
2. least load: otherwise the rank with the most headroom, free pages x page_size minus its queued
   tokens (what its waiting and running sequences still have to compute), lowest rank on ties. A
   new session's first request then pins the session to that rank.

NOTE: affinity is remembered for the `max_sessions` most recently seen sessions (LRU): a session
idle long enough to fall out has long lost its cached pages to newer ones as well.
"""

from __future__ import annotations

from collections import Counter, OrderedDict, deque
from dataclasses import dataclass
from typing import Literal, Optional


@dataclass(frozen=True)
class RankLoad:
    queued_tokens: int  # tokens the rank's waiting and running sequences have still to compute
    free_pages: int

    def headroom(self, page_size: int) -> int:
        return self.free_pages * page_size - self.queued_tokens


@dataclass(frozen=True)
class Placement:
    request_id: str
    session_id: Optional[str]
    rank: int
    reason: Literal["affinity", "least_load"]
    loads: tuple[RankLoad, ...]  # what the choice saw, rank order


class SessionPlacer:
    def __init__(self, world: int, page_size: int, max_sessions: int = 1 << 16, max_records: int = 10_000):
        if world < 1:
            raise ValueError(f"SessionPlacer: world must be >= 1, got {world}")
        self.world = world
        self.page_size = page_size
        self.max_sessions = max_sessions
        self._home: OrderedDict[str, int] = OrderedDict()
        self.records: deque[Placement] = deque(maxlen=max_records)  # the most recent placements
        self.counts: Counter[str] = Counter()  # placements by reason, since start

    def rank_of(self, session_id: str) -> Optional[int]:
        return self._home.get(session_id)

    def place(self, request_id: str, session_id: Optional[str], loads: list[RankLoad]) -> Placement:
        if len(loads) != self.world:
            raise ValueError(f"placement of {request_id!r}: {len(loads)} rank loads for {self.world} ranks")
        home = self._home.get(session_id) if session_id is not None else None
        if home is not None:
            rank, reason = home, "affinity"
            self._home.move_to_end(session_id)
        else:
            rank = max(range(self.world), key=lambda r: (loads[r].headroom(self.page_size), -r))
            reason = "least_load"
            if session_id is not None:
                self._home[session_id] = rank
                if len(self._home) > self.max_sessions:
                    self._home.popitem(last=False)
        placement = Placement(request_id, session_id, rank, reason, tuple(loads))
        self.records.append(placement)
        self.counts[reason] += 1
        return placement
