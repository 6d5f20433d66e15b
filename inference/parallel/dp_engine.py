"""The engine's side of DP attention: one KV pool per rank behind the DP scheduler.

Engine._build makes rank 0's pool (allocator, host tier with its pages, radix cache, scheduler) as
for one process; this adds ranks 1..N-1's. Their pages live in their own processes, so the
leader's pools for them only keep the books: every page copy (radix copy-on-write) and host-tier
copy they decide on is sent to that rank (`OnRank`), which holds the same number of pages.
"""

from __future__ import annotations

import functools

from inference.engine.dp_placement import SessionPlacer
from inference.engine.dp_scheduler import DPScheduler
from inference.engine.host_tier import HostTier
from inference.engine.page_allocator import PageAllocator
from inference.engine.radix_cache import RadixCache
from inference.engine.scheduler import Scheduler


def dp_scheduler(engine, config, clock) -> DPScheduler:
    runner = engine.runner
    world = engine.ranks.state.world
    ranks = [engine.scheduler]
    for rank in range(1, world):
        allocator = PageAllocator(engine.num_device_pages)
        host = HostTier(config.host_pages())  # bookkeeping only: rank `rank` holds these host pages
        host.copier = functools.partial(runner.host_copy_on, rank)
        copy_page = functools.partial(_copy_page, runner, rank)
        cache = RadixCache(config.page_size, allocator, host, clock=clock, enabled=config.enable_prefix_cache,
                           copy_page=copy_page)
        ranks.append(Scheduler(config, cache, allocator))
    return DPScheduler(ranks, SessionPlacer(world, config.page_size))


def _copy_page(runner, rank: int, src: int, dst: int) -> None:
    runner.copy_pages_on(rank, [src], [dst])
