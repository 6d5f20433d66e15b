"""Two real processes over gloo (spawned once for the module): L0, the same sharded code gives
bit-identical results over gloo and over ThreadComm; L1, both processes hold identical replicated
state."""

from __future__ import annotations

import multiprocessing as mp
import socket

import pytest
import torch

from .gloo_worker import scenario_rank
from .scenario import assert_same_replicated, run_scenario
from .thread_ranks import load_ranks, on_ranks


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def gloo_results(tp_checkpoint, tmp_path_factory):
    out = tmp_path_factory.mktemp("gloo")
    ctx = mp.get_context("spawn")
    init = f"tcp://127.0.0.1:{_port()}"
    procs = [ctx.Process(target=scenario_rank, args=(r, 2, init, str(tp_checkpoint), str(out))) for r in range(2)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(timeout=120)
    assert [p.exitcode for p in procs] == [0, 0]
    return [torch.load(out / f"rank{r}.pt") for r in range(2)]


def test_gloo_equals_thread_ranks_bit_for_bit(tp_checkpoint, gloo_results):
    threads = on_ranks(load_ranks(tp_checkpoint, 2, 2), lambda m, r: run_scenario(m))
    for got, want in zip(gloo_results, threads):
        for a, b in zip(got["logits"], want["logits"]):
            assert (a is None and b is None) or torch.equal(a, b)
        assert_same_replicated(got, want)


def test_processes_hold_identical_replicated_state(gloo_results):
    assert_same_replicated(gloo_results[0], gloo_results[1])
    calls = gloo_results[0]["collectives"]
    # Every forward: an embedding all-reduce, two per layer, one logits gather.
    assert calls["all_reduce"] > 0 and calls["gather"] == len(gloo_results[0]["logits"])
