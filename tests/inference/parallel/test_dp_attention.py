"""DP attention on virtual ranks: each rank runs its own sequences with all heads and meets the
others only in the MoE token exchange; a rank without tokens still joins it (idle_forward).

Exactness: the router scores in fp32 and its GEMM's rounding depends on how many rows it sees,
and under DP it routes the gathered batch; so DP matches one process at fp32 precision (1e-5
relative), with the same expert choices, not at float64's 1e-10 as TP does."""

from __future__ import annotations

import pytest
import torch

from inference.forward_batch import ForwardBatch
from inference.loader import load_model
from inference.parallel import ParallelState, ThreadComm

from .thread_ranks import on_ranks

PROMPTS = [list(range(3, 16)), [(7 * i + 5) % 400 + 3 for i in range(21)], [9, 8, 7, 6, 5]]


def _dp_ranks(ckpt, world=2, dtype=torch.float64):
    comms = ThreadComm.group(world)
    return [load_model(ckpt, dtype=dtype, parallel=ParallelState(world, r, world, comms[r], attention_dp=True))
            for r in range(world)]


def _run(model, seqs: list[int], kernel_backend=None) -> dict:
    """Prefill, two decode steps and an MTP pass over these sequences on a fresh cache."""
    model.kernel_backend = kernel_backend
    cache = model.new_cache(num_pages=12, page_size=8)
    pages = [[4 * i + j for j in range(4)] for i in range(len(seqs))]
    prompts = [PROMPTS[s] for s in seqs]
    lens = [len(p) for p in prompts]
    out = model.forward_batch(ForwardBatch.build(prompts, [0] * len(seqs), pages, logits="all"), cache,
                              return_all_hidden=True)
    logits = [out.logits]
    hidden = out.all_hidden_states
    for step in range(2):
        b = ForwardBatch.build([[11 + step + s] for s in seqs], [n + step for n in lens], pages)
        logits.append(model.forward_batch(b, cache).logits)
    m = model.mtp_forward(ForwardBatch.build([p[1:] + [11] for p in prompts], [0] * len(seqs), pages), hidden, cache)
    logits.append(m.logits)
    return {"logits": logits, "latent": [t[: 4 * len(seqs)].clone() for t in cache.latent]}


def _close(a: torch.Tensor, b: torch.Tensor) -> bool:
    return ((a - b).abs().max() / b.abs().max().clamp_min(1)).item() < 1e-5


@pytest.mark.parametrize("kernel_backend", [None, "torch"])
def test_each_rank_matches_one_process_on_its_own_sequences(tp_checkpoint, kernel_backend):
    dtype = torch.float32 if kernel_backend else torch.float64  # the kernels' torch references take fp32
    ref = load_model(tp_checkpoint, dtype=dtype)
    assignment = {0: [0, 1], 1: [2]}  # uneven: rank 1's block of the exchange is mostly padding
    want = {r: _run(ref, seqs, kernel_backend) for r, seqs in assignment.items()}
    ranks = _dp_ranks(tp_checkpoint, dtype=dtype)
    assert ranks[0].model.layers[0].self_attn.n_heads == ranks[0].config.num_attention_heads  # all heads
    experts = ranks[0].model.layers[1].mlp.experts
    assert experts.gate_up_proj.shape[0] == ranks[0].config.n_routed_experts // 2  # experts split
    got = on_ranks(ranks, lambda m, r: _run(m, assignment[r], kernel_backend))
    for r in assignment:
        for a, b in zip(got[r]["logits"], want[r]["logits"]):
            assert a.shape == b.shape and _close(a, b)
        for a, b in zip(got[r]["latent"], want[r]["latent"]):
            assert _close(a.double(), b.double())


def test_an_idle_rank_still_serves_its_experts(tp_checkpoint):
    want = _run(load_model(tp_checkpoint, dtype=torch.float64), [0, 1])
    ranks = _dp_ranks(tp_checkpoint)

    def step(m, r):
        if r == 0:
            return _run(m, [0, 1])
        for mtp in (False, False, False, True):  # prefill, two decodes, the MTP pass
            m.idle_forward(mtp=mtp)
        return None

    got = on_ranks(ranks, step)
    for a, b in zip(got[0]["logits"], want["logits"]):
        assert _close(a, b)
    exchanged = ranks[1].parallel.comm.stats.calls
    moe_layers = sum(hasattr(layer.mlp, "gate") for layer in ranks[1].model.layers)
    assert exchanged["reduce_scatter"] == 3 * (moe_layers - 1) + 1  # every MoE layer of every pass
