"""Tensor/expert-parallel parity on virtual ranks (ThreadComm): L2 numerics and L1 replication.

L2 (../shared/docs/scaleout.md §5.1): float64, TP/EP logits within 1e-10 of one process, the
same top-k selections. L1: every rank's replicated state (KV latent + indexer keys, draft
selections, hidden states) is bit-identical.
"""

from __future__ import annotations

import pytest
import torch

from inference.loader import load_model

from .scenario import assert_same_replicated, run_scenario
from .thread_ranks import load_ranks, on_ranks

LAYOUTS = [(2, 2), (2, 1), (4, 4), (4, 2), (4, 1)]  # (tp, ep)


@pytest.fixture(scope="module")
def reference(tp_checkpoint):
    return load_model(tp_checkpoint, dtype=torch.float64)


def _compare(ref: dict, ranks: list[dict], tol: float = 1e-10) -> None:
    """tol: max abs difference relative to the largest logit (float64: 1e-10; fp32: 1e-5)."""
    for got, want in zip(ranks[0]["logits"], ref["logits"]):
        assert got.shape == want.shape
        assert ((got - want).abs().max() / want.abs().max().clamp_min(1)).item() < tol
    assert all(x is None for r in ranks[1:] for x in r["logits"])  # only the leader gets logits
    for got, want in zip(ranks[0]["drafts"], ref["drafts"]):
        assert torch.equal(got, want)  # the same selections as one process
    for got, want in zip(ranks[0]["latent"], ref["latent"]):
        assert (got.float() - want.float()).abs().max().item() < max(tol, 1e-10) * 10
    for r in ranks[1:]:
        assert_same_replicated(ranks[0], r)


@pytest.mark.parametrize("tp,ep", LAYOUTS)
def test_sharded_model_matches_one_process(tp_checkpoint, reference, tp, ep):
    ref = run_scenario(reference)
    models = load_ranks(tp_checkpoint, tp, ep)
    _compare(ref, on_ranks(models, lambda m, r: run_scenario(m)))


@pytest.mark.parametrize("kernel_backend,kv_cache_dtype,mode", [
    ("torch", "auto", "auto"), (None, "fp8", "auto"), (None, "auto", "absorbed"), (None, "auto", "expanded"),
    ("torch", "auto", "expanded"),  # the kernel path's expanded prefill (kv_b_proj rows per rank's heads)
])
def test_every_attention_path_shards(tp_checkpoint, reference, kernel_backend, kv_cache_dtype, mode):
    """The kernels path (torch references of the Triton kernels: fp32 only) and the FP8 cache."""
    dtype = torch.float32 if kernel_backend else torch.float64
    ref_model = load_model(tp_checkpoint, dtype=dtype) if kernel_backend else reference
    ref = run_scenario(ref_model, kernel_backend, kv_cache_dtype, mode)
    models = load_ranks(tp_checkpoint, 2, 2, dtype=dtype)
    ranks = on_ranks(models, lambda m, r: run_scenario(m, kernel_backend, kv_cache_dtype, mode))
    _compare(ref, ranks, 1e-5 if kernel_backend else 1e-10)


def test_cacheless_forward_and_fp8_checkpoint(tp_checkpoint_fp8):
    """model(input_ids) over an FP8 checkpoint whose shards cut its 128x128 scale blocks."""
    ref = load_model(tp_checkpoint_fp8, dtype=torch.float64)
    ids = torch.randint(0, 400, (2, 20), generator=torch.Generator().manual_seed(0))
    want = ref(ids)
    outs = on_ranks(load_ranks(tp_checkpoint_fp8, 2, 1), lambda m, r: m(ids))
    assert outs[1] is None
    assert (outs[0] - want).abs().max().item() < 1e-10


def test_fp32_relative_error_is_small(tp_checkpoint):
    ref = load_model(tp_checkpoint, dtype=torch.float32)
    ids = torch.randint(0, 400, (1, 24), generator=torch.Generator().manual_seed(1))
    want = ref(ids)
    got = on_ranks(load_ranks(tp_checkpoint, 2, 2, dtype=torch.float32), lambda m, r: m(ids))[0]
    assert ((got - want).abs().max() / want.abs().max()).item() < 1e-5


@pytest.mark.parametrize("tp,ep", [(2, 2), (2, 1)])
def test_fp8_resident_shards_match_dequant_at_load(fp8_small_blocks, tp, ep):
    ref = load_model(fp8_small_blocks, dtype=torch.float64)
    want = run_scenario(ref)
    models = load_ranks(fp8_small_blocks, tp, ep, weight_format="fp8")
    layer = models[0].model.layers[1]
    assert layer.self_attn.q_b_proj.weight.dtype == torch.float8_e4m3fn  # resident, not expanded
    assert layer.mlp.experts.gate_up_proj.dtype == torch.float8_e4m3fn
    _compare(want, on_ranks(models, lambda m, r: run_scenario(m)))


def test_fp8_resident_refuses_shards_that_cut_scale_blocks(tp_checkpoint_fp8):
    from inference.loader import CheckpointError

    with pytest.raises(CheckpointError, match="cut its 128x128 FP8 scale blocks"):
        load_ranks(tp_checkpoint_fp8, 2, 2, weight_format="fp8")
