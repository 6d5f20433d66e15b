"""The torch indexer reference against transformers' GlmMoeDsaIndexer (the oracle) and basic masking."""

from __future__ import annotations

import torch
from transformers import GlmMoeDsaConfig
from transformers.models.glm_moe_dsa import modeling_glm_moe_dsa as hf

from kernels.indexer_topk import indexer_scores, indexer_topk, stable_topk


def _tiny_config(topk: int) -> GlmMoeDsaConfig:
    return GlmMoeDsaConfig(
        hidden_size=64, q_lora_rank=32, index_n_heads=4, index_head_dim=32, qk_rope_head_dim=16,
        index_topk=topk, num_attention_heads=4, kv_lora_rank=32, qk_nope_head_dim=16, v_head_dim=16,
        max_position_embeddings=256,
    )  # fmt: skip


def test_topk_selects_what_transformers_selects(make_paged_batch):
    torch.manual_seed(0)
    S, topk, page_size = 40, 8, 8
    cfg = _tiny_config(topk)
    indexer = hf.GlmMoeDsaIndexer(cfg, layer_idx=0).eval()
    rope = hf.GlmMoeDsaRotaryEmbedding(cfg)
    x, q_resid = torch.randn(1, S, cfg.hidden_size), torch.randn(1, S, cfg.q_lora_rank)
    position_ids = torch.arange(S)[None]
    cos, sin = rope(x, position_ids)
    causal = torch.tril(torch.ones(S, S, dtype=torch.bool))[None]
    with torch.no_grad():
        want = indexer(x, q_resid, (cos, sin), causal, position_ids, None)[0]  # [S, topk]

        # The same rotated q / k / head weights as transformers computes them, fed through our API.
        H, D, R = cfg.index_n_heads, cfg.index_head_dim, cfg.qk_rope_head_dim
        q = indexer.wq_b(q_resid).view(1, S, H, D)
        k = indexer.k_norm(indexer.wk(x)).unsqueeze(2)
        q_rot, k_rot = hf.apply_rotary_pos_emb_interleave(q[..., :R], k[..., :R], cos, sin, unsqueeze_dim=2)
        q = torch.cat([q_rot, q[..., R:]], -1)[0]
        k = torch.cat([k_rot, k[..., R:]], -1)[0, :, 0]
        w = indexer.weights_proj(x).float()[0] * H**-0.5

    batch = make_paged_batch([S], [S], page_size, torch.Generator().manual_seed(1))
    cache = torch.zeros(batch.num_slots, D)
    cache[batch.key_slots[0].long()] = k
    got = indexer_topk(q, w, cache, batch.key_slots, batch.query_seq, batch.query_pos, topk, D**-0.5, backend="torch")

    scores = indexer_scores(q, w, cache, batch.key_slots, batch.query_seq, batch.query_pos, D**-0.5, backend="torch")
    for t in range(S):
        got_set = set(got.positions[t][got.positions[t] >= 0].tolist())
        if t + 1 >= topk:
            # Keys tied exactly at the k-th score (all heads ReLU-clipped: 0) may be broken either
            # way by transformers; we take the earliest. Either way the selected scores agree.
            ours, theirs = scores[t, sorted(got_set)], scores[t, want[t].long()]
            assert torch.equal(ours.sort().values, theirs.sort().values), f"row {t}"
            kth = ours.min()
            assert {s for s in got_set if scores[t, s] > kth} == {s for s in want[t].tolist() if scores[t, s] > kth}
            tied = [s for s in range(t + 1) if scores[t, s] == kth]
            assert sorted(s for s in got_set if scores[t, s] == kth) == tied[: len(got_set) - int((ours > kth).sum())]
        else:  # fewer visible keys than topk: transformers pads with masked picks, we with -1
            assert got_set == set(range(t + 1)), f"row {t}"
            assert set(want[t].tolist()) >= got_set
    assert torch.equal(got.slots[got.positions >= 0], batch.key_slots[0].long()[got.positions[got.positions >= 0].long()].int())


def test_short_context_selects_every_visible_key(make_paged_batch):
    """With S <= topk the selection is plain causal attention (as in vLLM's short-prefill path)."""
    gen = torch.Generator().manual_seed(3)
    batch = make_paged_batch([5, 9], [5, 1], 4, gen)
    T = batch.query_seq.numel()
    q, w = torch.randn(T, 2, 16, generator=gen), torch.rand(T, 2, generator=gen)
    keys = torch.randn(batch.num_slots, 16, generator=gen)
    sel = indexer_topk(q, w, keys, batch.key_slots, batch.query_seq, batch.query_pos, 2048, 0.25, backend="torch")
    assert sel.positions.shape == (T, 9)
    for t in range(T):
        assert set(sel.positions[t][sel.positions[t] >= 0].tolist()) == set(range(int(batch.query_pos[t]) + 1))


def test_scores_follow_the_formula():
    gen = torch.Generator().manual_seed(4)
    q, w, keys = torch.randn(1, 3, 8, generator=gen), torch.randn(1, 3, generator=gen), torch.randn(4, 8, generator=gen)
    key_slots = torch.tensor([[2, 0, 3, 1]], dtype=torch.int32)
    zero = torch.zeros(1, dtype=torch.int32)
    scores = indexer_scores(q, w, keys, key_slots, zero, torch.tensor([2]), 0.5, backend="torch")
    for s, slot in enumerate([2, 0, 3]):
        expected = sum(float(w[0, h]) * max(0.0, float(q[0, h] @ keys[slot]) * 0.5) for h in range(3))
        assert abs(float(scores[0, s]) - expected) < 1e-5
    assert torch.isneginf(scores[0, 3])


def test_stable_topk_breaks_exact_ties_toward_earlier_positions():
    scores = torch.tensor([[0.0, 2.0, -0.0, 0.0, 2.0, float("-inf"), 1.0, 0.0]])
    assert stable_topk(scores, 5).tolist() == [[1, 4, 6, 0, 2]]
    # The choice does not depend on the row length (decode sees fewer keys than prefill).
    long = torch.zeros(3, 300)
    long[:, 100:] = float("-inf")
    assert torch.equal(stable_topk(long, 8), torch.arange(8).expand(3, 8))


def test_tied_scores_select_the_earliest_keys(make_paged_batch):
    """All-zero head weights tie every visible key at exactly 0: the first k positions win."""
    gen = torch.Generator().manual_seed(5)
    batch = make_paged_batch([30, 12], [30, 1], 4, gen)
    T, topk = batch.query_seq.numel(), 6
    q, w = torch.randn(T, 2, 16, generator=gen), torch.zeros(T, 2)
    keys = torch.randn(batch.num_slots, 16, generator=gen)
    sel = indexer_topk(q, w, keys, batch.key_slots, batch.query_seq, batch.query_pos, topk, 0.25, backend="torch")
    for t in range(T):
        visible = int(batch.query_pos[t]) + 1
        want = list(range(min(topk, visible))) + [-1] * max(0, topk - visible)
        assert sel.positions[t].tolist() == want, f"row {t}"
