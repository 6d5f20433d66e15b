"""DP attention on virtual ranks: each rank runs its own sequences with all heads and meets the
others in the token exchanges; a rank without tokens still joins them (idle_forward). Both layouts
of the extras: split (the default: embedding, LM head, dense MLPs and shared expert split over the
ranks, their rows exchanged) and replicated.

Exactness: the router scores in fp32 and its GEMM's rounding depends on how many rows it sees,
and under DP it routes the gathered batch; so DP matches one process at fp32 precision (1e-5
relative), with the same expert choices, not at float64's 1e-10 as TP does. The split extras'
partial sums add float64 rounding only."""

from __future__ import annotations

import pytest
import torch

from inference.forward_batch import ForwardBatch
from inference.loader import load_model
from inference.parallel import ParallelState, ThreadComm

from .thread_ranks import on_ranks

PROMPTS = [list(range(3, 16)), [(7 * i + 5) % 400 + 3 for i in range(21)], [9, 8, 7, 6, 5]]
ASSIGNMENT = {0: [0, 1], 1: [2]}  # uneven: rank 1's block of each exchange is mostly padding


def _dp_ranks(ckpt, extras: str = "split", world=2, dtype=torch.float64, **kw):
    comms = ThreadComm.group(world)
    return [load_model(ckpt, dtype=dtype, parallel=ParallelState(world, r, world, comms[r], attention_dp=True,
                                                                 split_extras=extras == "split"), **kw)
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


def _each_rank(got: list[dict], want: dict, extras: str) -> dict[int, list[torch.Tensor]]:
    """Every rank's logits per step: its own under replicated extras; under split extras the
    leader's rows of every rank (rank after rank), cut by the reference's row counts."""
    if extras == "replicated":
        return {r: got[r]["logits"] for r in want}
    assert all(x is None for x in got[1]["logits"])  # only the leader gets logits
    out: dict[int, list[torch.Tensor]] = {r: [] for r in want}
    for step, node in enumerate(got[0]["logits"]):
        start = 0
        for r in sorted(want):
            n = want[r]["logits"][step].shape[0]
            out[r].append(node[start:start + n])
            start += n
        assert start == node.shape[0]
    return out


def _assert_matches(got: list[dict], want: dict, extras: str) -> None:
    for r, logits in _each_rank(got, want, extras).items():
        for a, b in zip(logits, want[r]["logits"], strict=True):
            assert a.shape == b.shape and _close(a, b)
        for a, b in zip(got[r]["latent"], want[r]["latent"]):
            assert _close(a.double(), b.double())


@pytest.mark.parametrize("extras,kernel_backend", [("split", None), ("split", "torch"), ("replicated", None)])
def test_each_rank_matches_one_process_on_its_own_sequences(tp_checkpoint, extras, kernel_backend):
    dtype = torch.float32 if kernel_backend else torch.float64  # the kernels' torch references take fp32
    ref = load_model(tp_checkpoint, dtype=dtype)
    want = {r: _run(ref, seqs, kernel_backend) for r, seqs in ASSIGNMENT.items()}
    ranks = _dp_ranks(tp_checkpoint, extras, dtype=dtype)
    config, model = ranks[0].config, ranks[0].model
    assert model.layers[0].self_attn.n_heads == config.num_attention_heads  # all heads
    assert model.layers[1].mlp.experts.gate_up_proj.shape[0] == config.n_routed_experts // 2  # experts split
    parts = 2 if extras == "split" else 1
    assert model.embed_tokens.weight.shape[0] == ranks[0].lm_head.weight.shape[0] == config.vocab_size // parts
    assert model.layers[0].mlp.gate_proj.weight.shape[0] == config.intermediate_size // parts
    assert model.layers[1].mlp.shared_experts.gate_proj.weight.shape[0] == config.moe_intermediate_size // parts
    _assert_matches(on_ranks(ranks, lambda m, r: _run(m, ASSIGNMENT[r], kernel_backend)), want, extras)


@pytest.mark.parametrize("extras", ["split", "replicated"])
def test_an_idle_rank_still_serves_its_experts_and_slices(tp_checkpoint, extras):
    want = _run(load_model(tp_checkpoint, dtype=torch.float64), [0, 1])
    ranks = _dp_ranks(tp_checkpoint, extras)

    def step(m, r):
        if r == 0:
            return _run(m, [0, 1])
        for mtp in (False, False, False, True):  # prefill, two decodes, the MTP pass
            assert m.idle_forward(mtp=mtp) is None  # a follower never gets logits
        return None

    got = on_ranks(ranks, step)
    for a, b in zip(got[0]["logits"], want["logits"], strict=True):
        assert _close(a, b)
    calls = ranks[1].parallel.comm.stats.calls
    config = ranks[1].config
    moe, dense = config.num_hidden_layers - config.first_k_dense_replace, config.first_k_dense_replace
    if extras == "split":  # + the embedding's and every dense MLP's, and the head's gathers
        assert calls["reduce_scatter"] == 3 * (1 + dense + moe) + (1 + 1)
        assert calls["gather"] == 4
    else:  # every MoE layer of every pass; logits stay on each rank (the engine gathers them)
        assert calls["reduce_scatter"] == 3 * moe + 1 and "gather" not in calls


def test_fp8_resident_weights_shard_the_same_way(fp8_small_blocks):
    """FP8-resident e4m3 slices with their 8x8 scale blocks, split extras included, match the
    dequantized-at-load single process."""
    ref = load_model(fp8_small_blocks, dtype=torch.float64)
    want = {r: _run(ref, seqs) for r, seqs in ASSIGNMENT.items()}
    ranks = _dp_ranks(fp8_small_blocks, weight_format="fp8")
    dense, shared = ranks[1].model.layers[0].mlp, ranks[1].model.layers[1].mlp.shared_experts
    for linear in (dense.gate_proj, dense.down_proj, shared.up_proj):
        assert linear.weight.dtype == torch.float8_e4m3fn  # resident, not expanded
    assert dense.gate_proj.weight.shape[0] == ranks[1].config.intermediate_size // 2
    _assert_matches(on_ranks(ranks, lambda m, r: _run(m, ASSIGNMENT[r])), want, "split")


def test_fp8_resident_split_extras_refuse_to_cut_scale_blocks(tp_checkpoint_fp8):
    """128x128 blocks: the tiny dense MLP's halves (64 rows) would cut them."""
    from inference.loader import CheckpointError

    with pytest.raises(CheckpointError, match=r"'fp8' with DP attention with split extras over 2 ranks: "
                                              r"model.layers.0.mlp.gate_proj.weight: rank 0's rows \[0, 64\) cut.*"
                                              r"choose dp_extras='replicated'"):
        _dp_ranks(tp_checkpoint_fp8, weight_format="fp8")
