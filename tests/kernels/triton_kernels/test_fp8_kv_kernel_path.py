"""The kernel path over an FP8 KV cache (inference/layers/kernel_path.py): the Triton kernels read
compact buffers of dequantized rows and must select and attend exactly as the torch references do
over a model-dtype cache holding the same dequantized rows."""

from __future__ import annotations

import torch

from inference.config import ModelConfig
from inference.forward_batch import AttentionMetadata, ForwardBatch
from inference.kv_cache import PagedKVCache
from inference.kv_formats import DenseRows
from inference.layers import kernel_path
from inference.random_checkpoint import PRESETS

PAGE = 4


def _setup(device, gen):
    cfg = ModelConfig.from_dict({**PRESETS["tiny"], "model_type": "glm_moe_dsa",
                                 "rope_parameters": {"rope_theta": 1e6, "rope_type": "default"}})  # fmt: skip
    cache = PagedKVCache(cfg, 16, PAGE, torch.float32, device, kv_cache_dtype="fp8")
    # Two sequences (30 and 13 keys) on shuffled pages; 3 and 1 new tokens this step.
    tables = [[9, 2, 14, 0, 5, 11, 3, 8], [1, 12, 7, 4]]
    lens, new = [30, 13], [3, 1]
    batch = ForwardBatch.build([[1] * n for n in new], [n - q for n, q in zip(lens, new)], tables, "all", device)
    meta = AttentionMetadata.from_batch(batch, PAGE)
    slots = torch.cat([meta.key_slots[b, :n] for b, n in enumerate(lens)])
    latent, keys = cache.latent_rows(0), cache.indexer_rows(0)
    latent.write(slots, torch.randn(slots.numel(), cfg.latent_dim, generator=gen).to(device))
    keys.write(slots, torch.randn(slots.numel(), cfg.index_head_dim, generator=gen).to(device))
    every = torch.arange(16 * PAGE, device=device)
    # The same values, dequantized, in a model-dtype cache (indexer keys stay in the rotated basis).
    return cfg, meta, (latent, keys), (DenseRows(latent.gather(every)), DenseRows(keys.gather(every)))


def test_indexer_and_sparse_mla_over_fp8_rows_match_the_references(device, gen):
    cfg, meta, (latent, keys), (dense_latent, dense_keys) = _setup(device, gen)
    n = meta.positions.numel()
    q = keys.prepare_query(torch.randn(n, cfg.index_n_heads, cfg.index_head_dim, generator=gen).to(device))
    w = torch.randn(n, cfg.index_n_heads, generator=gen).to(device)
    scale = cfg.index_head_dim**-0.5
    got = kernel_path.indexer_slots(q, w, keys, meta, meta.positions, cfg.index_topk, scale, "triton")
    want = kernel_path.indexer_slots(q, w, dense_keys, meta, meta.positions, cfg.index_topk, scale, "torch")
    assert got.shape == (n, cfg.index_topk)
    assert torch.equal(got.sort(-1).values, want.sort(-1).values)  # cache slots, not buffer rows
    assert (got >= 0).all()  # every token sees more than index_topk keys here

    q_lat = torch.randn(n, cfg.num_attention_heads, cfg.latent_dim, generator=gen).to(device)
    rank = cfg.kv_lora_rank
    out = kernel_path.sparse_latent_attention(q_lat, latent, got, 0.1, rank, "triton")
    ref = kernel_path.sparse_latent_attention(q_lat, dense_latent, want, 0.1, rank, "torch")
    torch.testing.assert_close(out, ref, atol=1e-4, rtol=1e-4)
    holes = got.clone()
    holes[:, ::3] = -1  # masked slots stay masked through the renumbering
    out = kernel_path.sparse_latent_attention(q_lat, latent, holes, 0.1, rank, "triton")
    ref = kernel_path.sparse_latent_attention(q_lat, dense_latent, holes, 0.1, rank, "torch")
    torch.testing.assert_close(out, ref, atol=1e-4, rtol=1e-4)
