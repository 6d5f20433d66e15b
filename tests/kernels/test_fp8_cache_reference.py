"""The kernels' view of the FP8 KV-cache layouts (kernels/fp8_cache.py) agrees byte for byte with
the layouts inference/kv_formats.py writes, and the FP8 kernels' torch references equal
dequantize-then-compute through kv_formats' own readers. CPU only, plain torch."""

from __future__ import annotations

import pytest
import torch

from inference.kv_formats import Fp8IndexerRows, Fp8LatentRows, indexer_key_bytes, latent_row_bytes as kv_row_bytes
from kernels.fp8_cache import dequantize_indexer_keys, dequantize_latent_rows, indexer_page_bytes, latent_row_bytes
from kernels.indexer_topk import indexer_topk
from kernels.indexer_topk_fused import indexer_topk_fp8
from kernels.sparse_mla import sparse_mla_attention
from kernels.sparse_mla_fp8 import sparse_mla_fp8_attention


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_latent_layout_matches_kv_formats(dtype):
    gen = torch.Generator().manual_seed(0)
    assert latent_row_bytes(512, 64, torch.bfloat16) == kv_row_bytes(512, 64, torch.bfloat16) == 656
    storage = torch.zeros(4, 8, latent_row_bytes(256, 32, dtype), dtype=torch.uint8)
    rows = Fp8LatentRows(storage, 256, 32, dtype)
    rows.write(torch.arange(32), torch.randn(32, 288, generator=gen).to(dtype))
    slots = torch.tensor([3, 0, 31, 17])
    assert torch.equal(dequantize_latent_rows(rows.flat, 256, dtype, slots), rows.gather(slots))


@pytest.mark.parametrize("dim", [32, 128, 192])  # 192: two scale blocks, the last one short
def test_indexer_layout_matches_kv_formats(dim):
    gen = torch.Generator().manual_seed(1)
    assert indexer_page_bytes(64, 128) == 64 * indexer_key_bytes(128) == 64 * 132
    storage = torch.zeros(5, indexer_page_bytes(4, dim), dtype=torch.uint8)
    rows = Fp8IndexerRows(storage, 4, dim, torch.float32)
    rows.write(torch.arange(20), torch.randn(20, dim, generator=gen))
    slots = torch.tensor([19, 0, 5, 6, 11])
    assert torch.equal(dequantize_indexer_keys(storage, 4, dim, torch.float32, slots), rows.gather(slots))


def test_references_are_dequantize_then_compute():
    gen = torch.Generator().manual_seed(2)
    storage = torch.zeros(6, indexer_page_bytes(8, 32), dtype=torch.uint8)
    keys = Fp8IndexerRows(storage, 8, 32, torch.float32)
    keys.write(torch.arange(48), torch.randn(48, 32, generator=gen))
    key_slots = torch.randperm(48, generator=gen)[:40].view(2, 20).int()
    key_slots[1, 15:] = -1
    q, w = keys.prepare_query(torch.randn(3, 4, 32, generator=gen)), torch.randn(3, 4, generator=gen)
    seq, pos = torch.tensor([0, 1, 1]).int(), torch.tensor([19, 9, 14]).int()
    got = indexer_topk_fp8(q, w, storage, 8, key_slots, seq, pos, 6, 0.2, backend="torch")
    want = indexer_topk(q, w, keys.gather(torch.arange(48)), key_slots, seq, pos, 6, 0.2, backend="torch")
    assert torch.equal(got.positions, want.positions) and torch.equal(got.slots, want.slots)

    lat = torch.zeros(6, 8, latent_row_bytes(128, 16, torch.float32), dtype=torch.uint8)
    rows = Fp8LatentRows(lat, 128, 16, torch.float32)
    rows.write(torch.arange(48), torch.randn(48, 144, generator=gen))
    ql = torch.randn(3, 5, 144, generator=gen)
    out, lse = sparse_mla_fp8_attention(ql, lat, got.slots, 0.1, 128, backend="torch")
    ref, ref_lse = sparse_mla_attention(ql, rows.gather(torch.arange(48)), got.slots, 0.1, 128, backend="torch")
    torch.testing.assert_close(out, ref, atol=1e-6, rtol=1e-6)
    torch.testing.assert_close(lse, ref_lse, atol=1e-6, rtol=1e-6)


def test_bad_layouts_are_named():
    q = torch.randn(2, 4, 32)
    with pytest.raises(ValueError, match="key_pages"):
        indexer_topk_fp8(q, torch.randn(2, 4), torch.zeros(3, 100, dtype=torch.uint8), 8, torch.zeros(1, 8).int(),
                         torch.zeros(2).int(), torch.zeros(2).int(), 4, 0.1)  # fmt: skip
    with pytest.raises(ValueError, match="latent_rows"):
        sparse_mla_fp8_attention(torch.randn(2, 4, 144), torch.zeros(8, 99, dtype=torch.uint8),
                                 torch.zeros(2, 3).int(), 0.1, 128)  # fmt: skip


def test_kernel_path_reads_an_fp8_cache_without_dequantized_copies(monkeypatch):
    """inference/layers/kernel_path.py hands the FP8 bytes to the kernels: neither row store's
    gather (the old dequantize-into-a-buffer route) runs, and the selection and attention equal
    that route's."""
    from inference.config import ModelConfig
    from inference.forward_batch import AttentionMetadata, ForwardBatch
    from inference.kv_cache import PagedKVCache
    from inference.kv_formats import DenseRows
    from inference.layers import kernel_path
    from inference.random_checkpoint import PRESETS

    gen = torch.Generator().manual_seed(3)
    cfg = ModelConfig.from_dict({**PRESETS["tiny"], "model_type": "glm_moe_dsa",
                                 "rope_parameters": {"rope_theta": 1e6, "rope_type": "default"}})  # fmt: skip
    cache = PagedKVCache(cfg, 16, 4, torch.float32, "cpu", kv_cache_dtype="fp8")
    batch = ForwardBatch.build([[1] * 3, [1]], [27, 12], [[9, 2, 14, 0, 5, 11, 3, 8], [1, 12, 7, 4]], "all", "cpu")
    meta = AttentionMetadata.from_batch(batch, 4)
    slots = torch.cat([meta.key_slots[0, :30], meta.key_slots[1, :13]])
    latent, keys = cache.latent_rows(0), cache.indexer_rows(0)
    latent.write(slots, torch.randn(slots.numel(), cfg.latent_dim, generator=gen))
    keys.write(slots, torch.randn(slots.numel(), cfg.index_head_dim, generator=gen))
    every = torch.arange(64)
    dense_latent, dense_keys = DenseRows(latent.gather(every)), DenseRows(keys.gather(every))
    n = meta.positions.numel()
    q = keys.prepare_query(torch.randn(n, cfg.index_n_heads, cfg.index_head_dim, generator=gen))
    w = torch.randn(n, cfg.index_n_heads, generator=gen)
    q_lat = torch.randn(n, cfg.num_attention_heads, cfg.latent_dim, generator=gen)
    scale = cfg.index_head_dim**-0.5
    want = kernel_path.indexer_slots(q, w, dense_keys, meta, meta.positions, cfg.index_topk, scale, "torch")
    want_out = kernel_path.sparse_latent_attention(q_lat, dense_latent, want, 0.1, cfg.kv_lora_rank, "torch")

    def refuse(self, slots):
        raise AssertionError("the kernel path dequantized FP8 rows into a copy")

    monkeypatch.setattr(type(keys), "gather", refuse)
    monkeypatch.setattr(type(latent), "gather", refuse)
    got = kernel_path.indexer_slots(q, w, keys, meta, meta.positions, cfg.index_topk, scale, "torch")
    assert torch.equal(got, want)
    out = kernel_path.sparse_latent_attention(q_lat, latent, got, 0.1, cfg.kv_lora_rank, "torch")
    torch.testing.assert_close(out, want_out, atol=1e-6, rtol=1e-6)
