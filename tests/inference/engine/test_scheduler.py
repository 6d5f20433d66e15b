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


from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402


@settings(max_examples=40, deadline=None)
@given(st.integers(0, 10_000), st.integers(6, 30), st.integers(0, 12), st.booleans())
def test_random_sessions_complete_and_conserve_pages(seed, device_pages, host_pages, retain):
    """Multi-turn sessions, partial pages, host spills, preemption, aborts: every request ends
    with its exact output, and every page is either free or cached at the end."""
    import random

    from inference.engine.host_tier import HostTier

    rng = random.Random(seed)
    clock = [0.0]
    config = EngineConfig(kv_budget_tokens=device_pages * PS, page_size=PS, max_batch_tokens=rng.choice([4, 9, 32]),
                          chunk_size=rng.choice([3, 8, 32]), session_ttl_s=5.0 if retain else 0.0)
    alloc = PageAllocator(device_pages)
    cache = RadixCache(PS, alloc, HostTier(host_pages), clock=lambda: clock[0])
    sched = Scheduler(config, cache, alloc)
    histories = {s: [1000 + s] * rng.randrange(1, 9) for s in range(4)}
    pending, done = [], []
    for turn in range(12):
        s = rng.randrange(4)
        prompt = histories[s] + [rng.randrange(50) for _ in range(rng.randrange(1, 6))]
        if len(prompt) + 4 >= device_pages * PS:
            continue
        q = Sequence(f"t{turn}", prompt, SamplingParams(max_tokens=rng.randrange(1, 5)), session_id=f"s{s}")
        sched.add(q)
        pending.append(q)
        while sched.has_work() and rng.random() < 0.7:
            for it in sched.schedule().items:
                it.seq.num_computed += len(it.token_ids)
                sched.cache_prefix(it.seq)
                if it.num_logits:
                    it.seq.tokens.append(7)
                    if it.seq.num_output >= it.seq.params.max_tokens:
                        sched.finish(it.seq, "length")
                        histories[s] = list(it.seq.tokens)
            clock[0] += 1.0
        if pending and rng.random() < 0.1:
            victim = pending.pop(rng.randrange(len(pending)))
            sched.finish(victim, "abort")
    while sched.has_work():
        for it in sched.schedule().items:
            it.seq.num_computed += len(it.token_ids)
            sched.cache_prefix(it.seq)
            if it.num_logits:
                it.seq.tokens.append(7)
                if it.seq.num_output >= it.seq.params.max_tokens:
                    sched.finish(it.seq, "length")
    for q in pending:
        assert q.finish_reason in ("length", "abort")
        if q.finish_reason == "length":
            assert q.num_output == q.params.max_tokens
        assert q.cached_device + q.cached_host <= q.prompt_len - 1
    assert alloc.num_free + cache.device_cached_pages == device_pages
    assert cache.host.num_free + cache.host_cached_pages == host_pages
    cache.clear()
    assert alloc.num_free == device_pages and cache.host.num_free == host_pages


def test_admission_that_needs_its_own_tail_page_recomputes_those_tokens():
    sched, alloc = make(pages=6, max_batch_tokens=64, chunk_size=64)
    first = seq(range(100, 110), n=1, name="first")  # 10 tokens: 2 whole pages + a 2-token tail
    sched.add(first)
    while sched.has_work():
        run_step(sched)
    assert sched.cache.device_cached_pages == 3
    # Extends the cached prefix but needs every page: the only thing left to evict is the tail.
    longer = seq(list(range(100, 111)) + list(range(500, 512)), n=1, name="longer")
    sched.add(longer)
    batch = sched.schedule()
    assert batch.items[0].start == 8 and longer.cached_device == 8
    assert alloc.num_free + sched.cache.device_cached_pages + len(longer.pages) - longer.num_tree_pages == 6
