"""What `Engine.stats()` reports about one KV pool (device pages, host tier, prefix cache, queues,
prefix hits), and the node totals over several (one pool per DP-attention rank)."""

from __future__ import annotations


def new_hits() -> dict[str, int]:
    """Prompt tokens of finished requests, and how many of them came from each cache tier."""
    return {"prompt": 0, "device": 0, "host": 0}


def count_hits(hits: dict[str, int], seq) -> None:
    hits["prompt"] += seq.prompt_len
    hits["device"] += seq.cached_device
    hits["host"] += seq.cached_host


def hit_rates(hits: dict[str, int]) -> dict:
    p = hits["prompt"]
    return {
        "prompt_tokens": p,
        "hit_rate": (hits["device"] + hits["host"]) / p if p else 0.0,
        "device_hit_rate": hits["device"] / p if p else 0.0,
        "host_hit_rate": hits["host"] / p if p else 0.0,
    }


def pool_stats(scheduler, hits: dict[str, int]) -> dict:
    """One pool: `scheduler` with its allocator, prefix cache and (through the cache) host tier."""
    allocator, cache = scheduler.allocator, scheduler.cache
    host = cache.host
    return {
        "total_pages": allocator.num_pages,
        "free_pages": allocator.num_free,
        "device_cached_pages": cache.device_cached_pages,
        "host_pages": host.allocator.num_pages,
        "host_free_pages": host.num_free,
        "host_cached_pages": cache.host_cached_pages,
        "running": len(scheduler.running),
        "waiting": len(scheduler.waiting),
        "preemptions": scheduler.num_preemptions,
        "pages_spilled": host.pages_spilled,
        "pages_restored": host.pages_restored,
        "host_pages_dropped": host.pages_dropped,
        "host_tail_pages": cache.stats()["host_tail_pages"],
        **hit_rates(hits),
        **cache.states.stats(),  # recurrent-state snapshots (hybrid models only)
    }


_RATES = ("prompt_tokens", "hit_rate", "device_hit_rate", "host_hit_rate")


def node_stats(schedulers: list, hits: list[dict[str, int]]) -> tuple[dict, list[dict]]:
    """(node totals with the keys of `pool_stats`, each pool's own stats)."""
    per_pool = [pool_stats(s, h) for s, h in zip(schedulers, hits)]
    total = {key: sum(p[key] for p in per_pool) for key in per_pool[0] if key not in _RATES}
    summed = {k: sum(h[k] for h in hits) for k in new_hits()}
    return {**total, **hit_rates(summed)}, per_pool
