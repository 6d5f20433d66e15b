"""Scheduler without a model: token budgets, chunking, longest-prefix-first admission with
anti-starvation, preemption of the youngest and its resumption through the prefix cache."""

from __future__ import annotations

from inference.engine.engine_config import EngineConfig
from inference.engine.host_tier import HostTier
from inference.engine.page_allocator import PageAllocator
from inference.engine.radix_cache import RadixCache
from inference.engine.sampling_params import SamplingParams
from inference.engine.scheduler import Scheduler
from inference.engine.sequence import Sequence, Status

PS = 4


def make(pages=64, **cfg):
    config = EngineConfig(kv_budget_tokens=pages * PS, page_size=PS, **cfg)
    alloc = PageAllocator(pages)
    cache = RadixCache(PS, alloc, HostTier(0))
    return Scheduler(config, cache, alloc), alloc


def seq(tokens, n=4, name="r"):
    return Sequence(name, list(tokens), SamplingParams(max_tokens=n))


def run_step(sched, next_token=7):
    """What the engine does after a forward: advance KV, append a token where one is sampled."""
    batch = sched.schedule()
    for it in batch.items:
        it.seq.num_computed += len(it.token_ids)
        if it.num_logits:
            it.seq.tokens.append(next_token)
            if it.seq.num_output >= it.seq.params.max_tokens:
                sched.finish(it.seq, "length")
    return batch


def test_chunked_prefill_respects_budgets():
    sched, _ = make(max_batch_tokens=10, chunk_size=6)
    a, b = seq(range(100, 120), name="a"), seq(range(200, 205), name="b")
    sched.add(a)
    sched.add(b)
    batch = run_step(sched)
    assert [(it.seq.request_id, len(it.token_ids), it.num_logits) for it in batch.items] == [("a", 6, 0), ("b", 4, 0)]
    batch = run_step(sched)
    # Running sequences keep going first: a's next chunk, then b's last token (which samples).
    assert [(it.seq.request_id, len(it.token_ids), it.num_logits) for it in batch.items] == [("a", 6, 0), ("b", 1, 1)]


def test_decodes_and_prefill_share_a_step():
    sched, _ = make(max_batch_tokens=8, chunk_size=8)
    a = seq(range(10, 14), n=5, name="a")
    sched.add(a)
    run_step(sched)
    sched.add(seq(range(50, 70), name="b"))
    batch = run_step(sched)
    assert [(it.seq.request_id, len(it.token_ids)) for it in batch.items] == [("a", 1), ("b", 7)]


def test_longest_cached_prefix_first_but_nobody_starves():
    sched, alloc = make(max_batch_tokens=16, chunk_size=16, max_wait_steps=3)
    hot = list(range(300, 316))
    done = seq(hot + [1], n=1, name="warm")
    sched.add(done)
    while sched.has_work():
        run_step(sched)
    cold, warm = seq(range(500, 516), name="cold"), seq(hot + [2, 3], name="hit")
    sched.add(cold)
    sched.add(warm)
    batch = sched.schedule()
    assert batch.items[0].seq.request_id == "hit" and batch.items[0].start == 16
    # A stream of cache hits cannot hold the cold request back past max_wait_steps.
    sched2, _ = make(max_batch_tokens=16, chunk_size=16, max_wait_steps=3)
    starving = seq(range(900, 916), name="cold")
    starving.wait_steps = 3
    sched2.add(seq(range(950, 952), name="other"))
    sched2.add(starving)
    assert sched2.schedule().items[0].seq.request_id == "cold"


def test_preempts_youngest_and_resumes_from_cache():
    sched, alloc = make(pages=6, max_batch_tokens=64, chunk_size=64)
    old, young = seq(range(10, 18), n=8, name="old"), seq(range(40, 48), n=8, name="young")
    sched.add(old)
    sched.add(young)
    run_step(sched)  # both prefilled: 2 pages each; decoding grows them until 6 pages run out
    while sched.num_preemptions == 0 and sched.has_work():
        run_step(sched)
    assert sched.num_preemptions >= 1 and young.status is Status.WAITING
    assert old.status is Status.RUNNING
    while sched.has_work():
        run_step(sched)
    assert old.num_output == young.num_output == 8
    assert young.num_preemptions >= 1
    sched.cache.clear()
    assert alloc.num_free == 6
