"""Batched sampler: filters, forced/banned tokens, seeds, and the sampled distribution."""

from __future__ import annotations

import torch

from inference.engine.sampler import SampleRow, sample
from inference.engine.sampling_params import SamplingParams

LOGITS = torch.tensor([2.0, 1.0, 0.5, 0.0, -1.0])


def rows(n, **params):
    return [SampleRow(SamplingParams(**params), i) for i in range(n)]


def test_greedy_forced_and_banned():
    logits = LOGITS.repeat(3, 1)
    r = rows(3, temperature=0.0)
    r[1].forced, r[2].banned = 4, 0
    tokens, _ = sample(logits, r)
    assert tokens == [0, 4, 1]


def test_filters_that_leave_one_token_equal_greedy():
    torch.manual_seed(0)
    logits = LOGITS.repeat(64, 1)
    for params in (dict(top_k=1), dict(top_p=0.01), dict(min_p=1.0)):
        tokens, _ = sample(logits, rows(64, temperature=1.5, **params))
        assert set(tokens) == {0}, params


def test_top_k_and_min_p_bound_the_support():
    torch.manual_seed(0)
    logits = LOGITS.repeat(2000, 1)
    assert set(sample(logits, rows(2000, temperature=1.0, top_k=2))[0]) == {0, 1}
    # min_p 0.3 keeps tokens with p >= 0.3 * p_max: exp(-1) and exp(-1.5) of the max qualify.
    assert set(sample(logits, rows(2000, temperature=1.0, min_p=0.3))[0]) == {0, 1}


def test_distribution_matches_softmax():
    torch.manual_seed(0)
    n = 20000
    tokens, _ = sample(LOGITS.repeat(n, 1), rows(n, temperature=1.0))
    freq = torch.bincount(torch.tensor(tokens), minlength=5).float() / n
    assert torch.allclose(freq, torch.softmax(LOGITS, -1), atol=0.015)


def test_seeded_rows_do_not_depend_on_batch_position():
    logits = torch.randn(6, 300, generator=torch.Generator().manual_seed(1))
    r = rows(6, temperature=1.0, seed=7)
    alone = [sample(logits[i:i + 1], [SampleRow(r[i].params, 3)])[0][0] for i in range(6)]
    together, _ = sample(logits, [SampleRow(x.params, 3) for x in r])
    assert together == alone
    again, _ = sample(logits, [SampleRow(x.params, 3) for x in r])
    assert again == together


def test_logprobs_are_log_softmax_of_the_logits():
    _, lps = sample(LOGITS[None], [SampleRow(SamplingParams(temperature=0.0, logprobs=2), 0)])
    ref = torch.log_softmax(LOGITS, -1)
    assert abs(lps[0].logprob - ref[0].item()) < 1e-6
    assert [t for t, _ in lps[0].top] == [0, 1]
