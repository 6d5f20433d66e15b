"""Parity with transformers' GlmMoeDsaForCausalLM (the oracle), fp32.

Metric: max |logits_ours - logits_hf| over every position and vocabulary entry <= 1e-4, with
weights drawn so logits are O(1). Checkpoints are written by transformers' save_pretrained and
read by our loader.
"""

from __future__ import annotations

import pytest
import torch

from inference.forward_batch import ForwardBatch
from inference.loader import load_model

TOL = 1e-4
HF_LATENT_EPS = 1e-6  # transformers' q_a/kv_a RMSNorm class default (see inference/config.py)


def _hf_logits(hf, ids: torch.Tensor) -> torch.Tensor:
    with torch.no_grad():
        return hf(ids).logits


def _ids(seed: int, shape, vocab: int = 96) -> torch.Tensor:
    return torch.randint(2, vocab, shape, generator=torch.Generator().manual_seed(seed))


CASES = {
    "a_longer_than_topk": dict(),
    "b_indexshare_freq4_offset2": dict(num_hidden_layers=6, index_topk_freq=4, index_skip_topk_offset=2),
    "b_indexshare_freq4_offset3": dict(num_hidden_layers=6, index_topk_freq=4, index_skip_topk_offset=3),
    "b_indexshare_pattern": dict(index_topk_pattern="FSFS"),
    "c_group_limited_routing": dict(n_routed_experts=8, n_group=4, topk_group=2, num_experts_per_tok=3),
    "d_dense_first_two": dict(first_k_dense_replace=2),
    "d_all_moe": dict(first_k_dense_replace=0),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_logits_match_transformers(hf_checkpoint, case):
    hf, path = hf_checkpoint(seed=len(case), **CASES[case])
    ours = load_model(path, dtype=torch.float32, latent_norm_eps=HF_LATENT_EPS)
    assert ours.config.indexer_types == tuple(hf.config.indexer_types)
    ids = _ids(1, (2, 24))  # 24 > index_topk=6: the selection really excludes tokens
    ref = _hf_logits(hf, ids)
    assert ref.abs().max() > 1.0  # O(1) logits, so the tolerance is meaningful
    assert (ours(ids) - ref).abs().max().item() <= TOL


def test_indexshare_schedules_are_what_the_spec_says(hf_checkpoint):
    _, path = hf_checkpoint(num_hidden_layers=6, index_topk_freq=4, index_skip_topk_offset=3)
    cfg = load_model(path, latent_norm_eps=HF_LATENT_EPS).config
    assert [i for i, t in enumerate(cfg.indexer_types) if t == "full"] == [0, 1, 2]
    _, path = hf_checkpoint(num_hidden_layers=6, index_topk_freq=4, index_skip_topk_offset=2)
    cfg = load_model(path, latent_norm_eps=HF_LATENT_EPS).config
    assert [i for i, t in enumerate(cfg.indexer_types) if t == "full"] == [0, 1, 5]


def test_sparse_selection_changes_the_result(hf_checkpoint):
    """Guard for case (a): with top-k >= sequence length the logits differ, so sparsity is live."""
    hf, path = hf_checkpoint()
    ids = _ids(1, (1, 24))
    sparse = load_model(path, latent_norm_eps=HF_LATENT_EPS)(ids)
    dense = load_model(path, latent_norm_eps=HF_LATENT_EPS)
    for layer in dense.model.layers:
        if layer.self_attn.indexer is not None:
            layer.self_attn.indexer.topk = 10_000
    assert (sparse - dense(ids)).abs().max() > 1e-2
    assert (sparse - _hf_logits(hf, ids)).abs().max() <= TOL


def test_batch_of_different_lengths(hf_checkpoint):
    """(e) one flat ForwardBatch of 3 sequences == transformers run on each sequence alone."""
    hf, path = hf_checkpoint(seed=5)
    ours = load_model(path, latent_norm_eps=HF_LATENT_EPS)
    seqs = [_ids(10 + i, (n,)).tolist() for i, n in enumerate([5, 23, 14])]
    page = 4
    tables, next_page = [], 0
    for s in seqs:
        n_pages = -(-len(s) // page)
        tables.append(list(range(next_page + n_pages - 1, next_page - 1, -1)))  # reversed: pages need not be ordered
        next_page += n_pages
    cache = ours.new_cache(num_pages=next_page, page_size=page)
    out = ours.forward_batch(ForwardBatch.build(seqs, [0, 0, 0], tables, logits="all"), cache).logits
    start = 0
    for s in seqs:
        ref = _hf_logits(hf, torch.tensor([s]))[0]
        assert (out[start : start + len(s)] - ref).abs().max().item() <= TOL
        start += len(s)


def test_latent_norm_eps_switch_matches_both_settings(hf_checkpoint):
    """The q_a/kv_a RMSNorm eps discrepancy: transformers uses 1e-6, vLLM/SGLang the config's 1e-5.
    Both settings of our switch reproduce transformers run with the same eps; mixing them does not."""
    hf, path = hf_checkpoint(seed=3, rms_norm_eps=1e-5)
    ids = _ids(2, (1, 20))
    hf_1e6 = _hf_logits(hf, ids)
    for module in hf.modules():
        if type(module).__name__ == "GlmMoeDsaRMSNorm" and module.weight.shape[0] in (32, 24):
            module.variance_epsilon = 1e-5  # q_a_layernorm (32) and kv_a_layernorm (24)
    hf_1e5 = _hf_logits(hf, ids)
    ours_default = load_model(path)  # latent_norm_eps defaults to rms_norm_eps (serving engines)
    assert ours_default.config.latent_norm_eps == 1e-5
    ours_hf = load_model(path, latent_norm_eps=1e-6)
    matched = max((ours_default(ids) - hf_1e5).abs().max().item(), (ours_hf(ids) - hf_1e6).abs().max().item())
    mixed = (ours_default(ids) - hf_1e6).abs().max().item()
    assert matched <= TOL
    assert mixed > 5 * matched  # the switch is what closes the gap


def test_cached_rope_keys_use_transformers_layout(hf_checkpoint):
    """The interleaved-RoPE layout discrepancy: our cache rows hold the rotated rope key in the same
    order as transformers' cache (even-pair outputs, then odd-pair outputs), byte-comparable."""
    hf, path = hf_checkpoint(seed=4)
    ours = load_model(path, latent_norm_eps=HF_LATENT_EPS)
    ids = _ids(3, (1, 9))
    with torch.no_grad():
        hf_cache = hf(ids, use_cache=True).cache
    cache = ours.new_cache(num_pages=1, page_size=9)
    ours.forward_batch(ForwardBatch.build([ids[0].tolist()], [0], [[0]]), cache)
    rank = ours.config.kv_lora_rank
    for layer in range(ours.config.num_hidden_layers):
        row = cache.latent[layer][0]
        assert torch.allclose(row[:, :rank], hf_cache.layers[layer].keys[0, 0], atol=1e-5)
        assert torch.allclose(row[:, rank:], hf_cache.layers[layer].values[0, 0], atol=1e-5)
        if layer in cache.indexer:
            assert torch.allclose(cache.indexer[layer][0], hf_cache.layers[layer].indexer_keys[0], atol=1e-5)


def test_unprepared_model_matches_too(hf_checkpoint):
    """A model built directly from a state dict (no loader, so no rope-row permutation or fused
    GEMMs) runs the interleaved-RoPE path and must agree as well."""
    from inference.config import ModelConfig
    from inference.model import Glm5ForCausalLM

    hf, path = hf_checkpoint(seed=7)
    model = Glm5ForCausalLM(ModelConfig.from_pretrained(path, latent_norm_eps=HF_LATENT_EPS))
    model.load_state_dict(hf.state_dict())
    assert not model.model.layers[0].self_attn.rope_deinterleaved
    ids = _ids(4, (2, 24))
    assert (model.eval()(ids) - _hf_logits(hf, ids)).abs().max().item() <= TOL
