"""A stream of 1,000 mixed requests for leak checks, and what a drained KV pool must look like.

Half the prompts share a prefix, some belong to sessions, sampling and lengths vary, about one in
ten submissions aborts a random earlier request (queued, running or finished), and the engine steps
inline between submissions, so aborts hit requests in every state."""

from __future__ import annotations

import random

from inference.engine import GenerateRequest, SamplingParams

from .conftest import make_prompt


def submit_mixed_requests(eng, clock, n: int = 1000, seed: int = 0) -> list:
    """Submit the stream to `eng` (advancing `clock`, a FakeClock); returns the handles."""
    rng = random.Random(seed)
    shared = make_prompt(999, 20)
    handles = []
    for i in range(n):
        kind = rng.random()
        prompt = (shared if kind < 0.5 else []) + make_prompt(rng.randrange(60), rng.randrange(1, 40))
        params = SamplingParams(temperature=rng.choice([0.0, 0.8]), top_k=rng.choice([0, 5]), seed=rng.choice([None, i]),
                                max_tokens=rng.randrange(1, 4), stop_token_ids=[rng.randrange(400)], ignore_eos=True)
        handles.append(eng.submit(GenerateRequest(prompt_ids=prompt, params=params, request_id=f"r{i}",
                                                  session_id=f"s{rng.randrange(8)}" if kind < 0.3 else None)))
        if rng.random() < 0.1:
            eng.abort(f"r{rng.randrange(i + 1)}")
        if i % 50 == 0:
            eng.step()
            clock.t += 1.0
    return handles


def assert_pool_drained(stats: dict) -> None:
    """Nothing queued or running; every device and host page free or held by the prefix cache."""
    assert stats["running"] == stats["waiting"] == 0
    assert stats["free_pages"] + stats["device_cached_pages"] == stats["total_pages"]
    assert stats["host_free_pages"] + stats["host_cached_pages"] == stats["host_pages"]
