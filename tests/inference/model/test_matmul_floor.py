"""The matmul-floor tool behind the benchmarks' ceiling ratios records what a step multiplies."""

from __future__ import annotations

import torch
from torch import nn

from benchmarks.matmul_floor import record_matmuls, replay_seconds


def test_records_every_matmul_with_the_model_weights_it_streams():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(64, 128, bias=False), nn.ReLU(), nn.Linear(128, 32, bias=True))
    x = torch.randn(3, 64)
    trace = record_matmuls(lambda: model(x) @ torch.randn(32, 5))
    # Two linears and the activation-only matmul; elementwise ops are not kept.
    assert len(trace.calls) == 3
    param_bytes = sum(p.numel() * p.element_size() for p in model.parameters())
    assert trace.weight_bytes(model) == param_bytes  # the activation operand is not a weight
    # Replaying reproduces the step's arithmetic with the recorded operands.
    func, args, kwargs = trace.calls[0]
    assert torch.equal(func(*args, **kwargs), x @ model[0].weight.T)
    assert replay_seconds(trace, reps=1) >= 0.0


def test_weight_views_are_counted_once_per_distinct_view():
    packed = nn.Parameter(torch.randn(4, 16, 8), requires_grad=False)
    holder = nn.Module()
    holder.packed = packed
    x = torch.randn(1, 8)
    # Two experts of a packed stack, one used twice: 2 distinct [16, 8] views.
    trace = record_matmuls(lambda: [x @ packed[e].T for e in (1, 3, 1)])
    assert len(trace.calls) == 3
    assert trace.weight_bytes(holder) == 2 * 16 * 8 * 4
