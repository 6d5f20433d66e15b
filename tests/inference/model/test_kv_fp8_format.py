"""The FP8 KV cache format itself: fp8_ds_mla latent rows and FP8 indexer keys in vLLM's page
layout, their round-trip error, and the bytes per token the docs derive (glm5-model.md §D)."""

from __future__ import annotations

import pytest
import torch

from inference.config import ModelConfig
from inference.kv_cache import PagedKVCache, kv_bytes_per_token
from inference.kv_formats import FP8_DTYPE, MIN_AMAX, hadamard

# The real widths (kv_lora_rank 512, rope 64, index_head_dim 128), few layers: 4 full + MTP.
REAL_WIDTHS = dict(
    model_type="glm_moe_dsa", num_hidden_layers=4, rope_parameters={"rope_theta": 1e6, "rope_type": "default"},
)  # fmt: skip
GLM5 = dict(REAL_WIDTHS, num_hidden_layers=78, num_nextn_predict_layers=1)
GLM52 = dict(GLM5, index_topk_freq=4, index_skip_topk_offset=3, rope_parameters={"rope_theta": 8e6, "rope_type": "default"})
PS = 64
E4M3_HALF_ULP = 2.0**-4  # 3 mantissa bits: round-to-nearest is off by at most 2^-4 of the value
E4M3_SUBNORMAL_HALF_STEP = 2.0**-10  # below 2^-6 the absolute step is 2^-9


def _rows(n: int, width: int, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, width, generator=g) * torch.rand(n, 1, generator=g) * 4
    x[0] = 0.0  # an all-zero row still gets a positive scale
    x[1, 3] = 300.0  # one outlier dominates its block's scale
    x[2, :] *= 1e-6  # far below the 1e-4 amax floor
    return x


def _within_e4m3_bound(x: torch.Tensor, got: torch.Tensor, scales: torch.Tensor) -> bool:
    """Per value: |x - q(x)| <= 2^-4 |x| + 2^-10 scale of its 128-block (normal and subnormal e4m3)."""
    per_value = scales.repeat_interleave(128, dim=-1)[:, : x.shape[1]]
    bound = E4M3_HALF_ULP * x.abs() + E4M3_SUBNORMAL_HALF_STEP * per_value + 1e-7 * x.abs()
    return bool(((got.float() - x).abs() <= bound).all())


@pytest.mark.parametrize("power_of_two", [False, True])
def test_latent_row_is_fp8_ds_mla_and_round_trips_within_the_e4m3_bound(power_of_two):
    cfg = ModelConfig.from_dict(REAL_WIDTHS)
    cache = PagedKVCache(cfg, 3, PS, torch.bfloat16, kv_cache_dtype="fp8", power_of_two_scales=power_of_two)
    assert cache.latent[0].shape == (3, PS, 656) and cache.latent[0].dtype == torch.uint8
    x = _rows(40, 576, seed=1).to(torch.bfloat16)
    slots = torch.randperm(3 * PS, generator=torch.Generator().manual_seed(0))[:40]
    rows = cache.latent_rows(2)
    rows.write(slots, x)

    raw = cache.latent[2].view(-1, 656)[slots]
    scales = raw[:, 512:528].contiguous().view(torch.float32)  # [40, 4]: one per 128 latent values
    amax = x[:, :512].float().view(40, 4, 128).abs().amax(-1).clamp_min(MIN_AMAX)
    if power_of_two:
        assert torch.equal(scales, torch.exp2(torch.log2(scales).round())) and (scales >= amax / 448).all()
        assert (scales < 2 * amax / 448).all()
    else:
        assert torch.allclose(scales, amax / 448, rtol=1e-6)
    assert torch.equal(raw[:, 528:].contiguous().view(torch.bfloat16), x[:, 512:])  # rope: bf16, untouched
    want_fp8 = (x[:, :512].float() / scales.repeat_interleave(128, -1)).to(FP8_DTYPE).view(torch.uint8)
    assert torch.equal(raw[:, :512], want_fp8)

    got = rows.gather(slots)
    assert got.dtype == torch.bfloat16 and torch.equal(got[:, 512:], x[:, 512:])  # rope bit-exact
    dequant = raw[:, :512].contiguous().view(FP8_DTYPE).float() * scales.repeat_interleave(128, -1)
    assert _within_e4m3_bound(x[:, :512].float(), dequant, scales)
    assert torch.equal(got[:, :512], dequant.to(torch.bfloat16))  # read back in the model dtype
    assert torch.equal(got[0], torch.zeros(576, dtype=torch.bfloat16))


def test_fp32_model_keeps_fp32_rope_and_bounds_the_latent_error():
    cfg = ModelConfig.from_dict(REAL_WIDTHS)
    cache = PagedKVCache(cfg, 2, PS, torch.float32, kv_cache_dtype="fp8")
    assert cache.latent[0].shape[-1] == 512 + 16 + 64 * 4
    x = _rows(50, 576, seed=2)
    slots = torch.arange(50) + 7
    rows = cache.latent_rows(0)
    rows.write(slots, x)
    got = rows.gather(slots)
    scales = cache.latent[0].view(-1, 784)[slots][:, 512:528].contiguous().view(torch.float32)
    assert torch.equal(got[:, 512:], x[:, 512:])
    assert _within_e4m3_bound(x[:, :512], got[:, :512], scales)
    # Not a no-op: e4m3 keeps 3 mantissa bits, so most values move.
    assert (got[:, :512] != x[:, :512]).float().mean() > 0.5


def test_indexer_keys_use_the_page_layout_and_the_hadamard_basis():
    cfg = ModelConfig.from_dict(REAL_WIDTHS)
    cache = PagedKVCache(cfg, 3, PS, torch.float32, kv_cache_dtype="fp8")
    assert cache.indexer[0].shape == (3, PS * 132)
    x = _rows(30, 128, seed=3)
    slots = torch.tensor([5, 70, 71, 140] + list(range(100, 126)))
    rows = cache.indexer_rows(1)
    rows.write(slots, x)

    h = hadamard(128, torch.device("cpu"))
    assert torch.allclose(h @ h, torch.eye(128), atol=1e-6)  # orthogonal and symmetric
    rotated = x @ h
    page = cache.indexer[1]
    # token 70 = page 1, offset 6: values at [6*128, 7*128), then its fp32 scale after the 64*128 values.
    values = page[1, 6 * 128 : 7 * 128].view(FP8_DTYPE).float()
    scale = page[1, PS * 128 + 6 * 4 : PS * 128 + 7 * 4].view(torch.float32)
    assert torch.allclose(scale, rotated[1].abs().max().clamp_min(MIN_AMAX) / 448, rtol=1e-6)
    assert torch.equal(values * scale, rows.gather(torch.tensor([70]))[0])

    got = rows.gather(slots)  # keys come back in the rotated basis
    scales = torch.stack([page[s // PS, PS * 128 + (s % PS) * 4 :][:4].view(torch.float32) for s in slots.tolist()])
    assert _within_e4m3_bound(rotated, got, scales)
    q = torch.randn(7, 128)
    exact = q @ x.T
    approx = rows.prepare_query(q) @ got.T  # q . k survives the rotation up to the e4m3 error
    assert (approx - exact).abs().max() <= 0.1 * exact.abs().max()


def test_bytes_per_token_match_the_docs_for_glm5_and_glm52():
    """glm5-model.md §D: fp8 MLA 656 B x 78 layers + FP8 indexer 132 B x (78 | 21) full layers =
    61,464 (GLM-5) / 53,940 (GLM-5.2/5.3) B/token; the MTP layer adds 656 + 132 = 788 B."""
    glm5, glm52 = ModelConfig.from_dict(GLM5), ModelConfig.from_dict(GLM52)
    for cfg, backbone, full_layers in ((glm5, 61_464, 78), (glm52, 53_940, 21)):
        assert len(cfg.indexer_layers) == full_layers + 1  # + the MTP layer's own indexer
        assert backbone == 78 * 656 + full_layers * 132
        assert kv_bytes_per_token(cfg, torch.bfloat16, "fp8") == backbone + 788
        no_mtp = ModelConfig.from_dict({**cfg.to_dict(), "num_nextn_predict_layers": 0})
        assert kv_bytes_per_token(no_mtp, torch.bfloat16, "fp8") == backbone
    # The bf16 rows of the same table: 109,824 (GLM-5) and 95,232 (GLM-5.2) + 1,408 for MTP.
    assert kv_bytes_per_token(glm5, torch.bfloat16) == 109_824 + 1_408
    assert kv_bytes_per_token(glm52, torch.bfloat16, "auto") == 95_232 + 1_408


def test_cache_allocates_exactly_what_bytes_per_token_reports():
    cfg = ModelConfig.from_dict({**GLM52, "num_hidden_layers": 8})
    for kv in ("auto", "fp8"):
        cache = PagedKVCache(cfg, 2, 16, torch.bfloat16, kv_cache_dtype=kv)
        allocated = sum(t.numel() * t.element_size() for t in [*cache.latent, *cache.indexer.values()])
        assert allocated == 2 * 16 * cache.bytes_per_token()
        saved = cache.read_pages(torch.tensor([1]))
        assert saved.nbytes == 16 * cache.bytes_per_token()


def test_bad_kv_cache_dtype_and_mixed_formats_are_rejected():
    cfg = ModelConfig.from_dict(REAL_WIDTHS)
    with pytest.raises(ValueError, match="kv_cache_dtype='fp16'.*'auto', 'fp8'"):
        PagedKVCache(cfg, 1, PS, kv_cache_dtype="fp16")
    with pytest.raises(ValueError, match="kv_cache_dtype"):
        kv_bytes_per_token(cfg, torch.bfloat16, "int8")
    fp8 = PagedKVCache(cfg, 2, PS, kv_cache_dtype="fp8")
    plain = PagedKVCache(cfg, 2, PS)
    with pytest.raises(ValueError, match="page shapes"):
        fp8.write_pages(torch.tensor([0]), plain.read_pages(torch.tensor([0])))
    with pytest.raises(TypeError, match="latent_rows"):
        fp8.latent_flat(0)


@pytest.mark.parametrize("page_size", [3, 64])  # 3: no flat-row view of the page layout, 2-D indexing
def test_indexer_gather_is_the_same_with_and_without_the_flat_views(page_size):
    cfg = ModelConfig.from_dict(REAL_WIDTHS)
    cache = PagedKVCache(cfg, 4, page_size, torch.float32, kv_cache_dtype="fp8")
    rows = cache.indexer_rows(0)
    assert rows.flat_ok == (page_size == 64)
    slots = torch.randperm(4 * page_size)[: 2 * page_size]
    rows.write(slots, _rows(slots.numel(), 128, seed=5))
    page, offset = slots // page_size, slots % page_size
    by_page = (rows.values[page, offset].view(FP8_DTYPE).float() * rows.scales[page, offset]).to(torch.float32)
    assert torch.equal(rows.gather(slots), by_page)


def test_page_moves_copy_the_fp8_bytes_exactly():
    """Prefix-cache page copies, read/write_pages (preemption, offload) and the host tier's copies
    move raw bytes: what comes back reads exactly as what went out."""
    from inference.engine.host_tier import copy_pages

    cfg = ModelConfig.from_dict(REAL_WIDTHS)
    dev = PagedKVCache(cfg, 6, 16, torch.bfloat16, kv_cache_dtype="fp8")
    host = PagedKVCache(cfg, 4, 16, torch.bfloat16, kv_cache_dtype="fp8")
    slots = torch.arange(32)  # pages 0 and 1
    for layer in range(len(dev.latent)):
        dev.latent_rows(layer).write(slots, _rows(32, 576, seed=layer).to(torch.bfloat16))
    for layer in dev.indexer:
        dev.indexer_rows(layer).write(slots, _rows(32, 128, seed=10 + layer).to(torch.bfloat16))

    def read(cache, pages):
        s = torch.cat([torch.arange(p * 16, p * 16 + 16) for p in pages])
        return [cache.latent_rows(i).gather(s) for i in range(len(cache.latent))] + [
            cache.indexer_rows(i).gather(s) for i in cache.indexer
        ]

    want = read(dev, [0, 1])
    dev.copy_pages(torch.tensor([0, 1]), torch.tensor([4, 5]))  # a prefix hit's page copies
    assert all(torch.equal(a, b) for a, b in zip(read(dev, [4, 5]), want))
    copy_pages(dev, [0, 1], host, [2, 3], non_blocking=False)  # spill to the host tier
    saved = dev.read_pages(torch.tensor([0, 1]))
    for t in [*dev.latent, *dev.indexer.values()]:
        t.zero_()
    copy_pages(host, [2, 3], dev, [1, 0], non_blocking=False)  # restore, pages swapped
    dev.write_pages(torch.tensor([3, 2]), saved)  # preemption's saved pages, swapped too
    for got in (read(host, [2, 3]), read(dev, [1, 0]), read(dev, [3, 2])):
        assert all(torch.equal(a, b) for a, b in zip(got, want))
