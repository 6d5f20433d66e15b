"""Indexer scoring and top-k fused in one pass over the paged keys (bf16/fp32 or the FP8 layout).

Same selection as ``indexer_topk`` (kernels/indexer_topk.py): per query token the k keys of
highest score, exact ties to the earlier position, -1 past the visible keys. The [tokens,
context] fp32 score matrix is never written. Each program scores one query token against one
split of its sequence's keys, chunk by chunk of KP = next_pow2(k) keys, and keeps the split's
running top-KP in registers as 64-bit keys (order-preserving score bits << 32 | reversed
position: the ``stable_topk`` key, so sorting on it applies the tie rule):

    chunk  = sort_ascending(keys of the chunk's KP scores)
    best   = sort_descending(max(best, chunk))   # best is descending: the elementwise max of a
                                                  # descending and an ascending list is the top
                                                  # KP of their union (bitonic merge)

A chunk whose best key does not beat the current KP-th is skipped without sorting. The splits'
candidates, [tokens, splits, KP] int64 (splits only as many as fill the GPU, so at most
max(tokens, 2 x SMs) x KP x 8 bytes whatever the context), are merged by one torch topk.
Keys past a token's causal frontier are never read.

FP8 keys (kernels/fp8_cache.py) are dequantized in registers as they are loaded: e4m3 x scale in
fp32 rounded to q's dtype, the arithmetic of dequantize-then-score, which is the torch reference.
"""

from __future__ import annotations

import functools

import torch

from kernels.backend import TritonKernel, cdiv, dot_precision, next_pow2, resolve_backend, tl
from kernels.fp8_cache import E4M3, check_indexer_pages, dequantize_indexer_keys, num_scale_blocks
from kernels.indexer_topk import IndexerTopk, indexer_topk
from kernels.validate import FLOAT_DTYPES, INDEX_DTYPES, check_same_device, check_tensor

# stable_topk's key of a -inf score at the last position: below every real candidate.
_NEG_INF_ORDERED = -2139095041  # int32 bits of -inf (0xFF800000) ^ 0x7FFFFFFF
EMPTY_KEY = _NEG_INF_ORDERED * (1 << 32)


def _fused_topk_kernel(
    q_ptr, w_ptr, keys_ptr, scales_ptr, key_slots_ptr, query_seq_ptr, query_pos_ptr, cand_ptr,
    S, H, D, softmax_scale, keys_per_split, page_size, val_page_stride, scale_page_stride, scale_start,
    stride_qt, stride_qh, stride_wt, stride_slots_b, stride_ct,
    FP8: tl.constexpr, NUM_SCALES: tl.constexpr, BLOCK_S: tl.constexpr, NSUB: tl.constexpr,
    BLOCK_H: tl.constexpr, BLOCK_D: tl.constexpr, DOT_PRECISION: tl.constexpr, UPCAST: tl.constexpr,
):  # fmt: skip
    KP: tl.constexpr = NSUB * BLOCK_S
    t = tl.program_id(0)
    split = tl.program_id(1)
    seq = tl.load(query_seq_ptr + t).to(tl.int64)
    pos = tl.load(query_pos_ptr + t)
    start = split * keys_per_split
    end = tl.minimum(tl.minimum(S, start + keys_per_split), pos + 1)

    offs_h = tl.arange(0, BLOCK_H)
    offs_d = tl.arange(0, BLOCK_D)
    h_ok = offs_h < H
    d_ok = offs_d < D
    q = tl.load(q_ptr + t * stride_qt + offs_h[:, None] * stride_qh + offs_d[None, :],
                mask=h_ok[:, None] & d_ok[None, :], other=0.0)  # fmt: skip
    w = tl.load(w_ptr + t * stride_wt + offs_h, mask=h_ok, other=0.0)
    if UPCAST:
        q = q.to(tl.float32)
    rows = tl.arange(0, NSUB)
    empty = tl.full([NSUB, BLOCK_S], _EMPTY_KEY_CONST, tl.int64)
    best = tl.full([KP], _EMPTY_KEY_CONST, tl.int64)
    for c0 in range(start, end, KP):
        chunk = empty
        for j in range(0, NSUB):
            offs_s = c0 + j * BLOCK_S + tl.arange(0, BLOCK_S)
            ok = offs_s < end
            slots = tl.load(key_slots_ptr + seq * stride_slots_b + offs_s, mask=ok, other=-1).to(tl.int64)
            live = ok & (slots >= 0)
            page = slots // page_size
            offset = slots % page_size
            kmask = live[None, :] & d_ok[:, None]
            k_addr = page[None, :] * val_page_stride + offset[None, :] * D + offs_d[:, None]
            if FP8:
                k = tl.load(keys_ptr + k_addr, mask=kmask, other=0.0).to(tl.float32)
                # One scale per (128-value block, key), broadcast over the block (a full [D, S]
                # scale tile would cost as many registers as the keys).
                GROUP: tl.constexpr = 128 if BLOCK_D >= 128 else BLOCK_D
                offs_g = tl.arange(0, BLOCK_D // GROUP)
                s_addr = page[None, :] * scale_page_stride + scale_start + offset[None, :] * NUM_SCALES + offs_g[:, None]
                scale = tl.load(scales_ptr + s_addr, mask=live[None, :] & (offs_g[:, None] < NUM_SCALES), other=0.0)
                k = tl.reshape(k, [BLOCK_D // GROUP, GROUP, BLOCK_S]) * scale[:, None, :]
                k = tl.reshape(k, [BLOCK_D, BLOCK_S]).to(q_ptr.dtype.element_ty)
            else:
                k = tl.load(keys_ptr + k_addr, mask=kmask, other=0.0)
            k = k.to(q.dtype)
            logits = tl.maximum(tl.dot(q, k, input_precision=DOT_PRECISION) * softmax_scale, 0.0)  # [H, S]
            score = tl.sum(logits * w[:, None], axis=0)
            score = tl.where(live, score, float("-inf")) + 0.0  # + 0.0: -0.0 ranks as 0.0
            bits = score.to(tl.int32, bitcast=True)
            ordered = tl.where(bits < 0, bits ^ 0x7FFFFFFF, bits).to(tl.int64)
            packed = (ordered << 32) | (S - 1 - offs_s).to(tl.int64)
            packed = tl.where(ok, packed, _EMPTY_KEY_CONST)  # past the end, S - 1 - s < 0 would mangle it
            chunk = tl.where(rows[:, None] == j, packed[None, :], chunk)
        if tl.max(tl.max(chunk, axis=1), axis=0) > tl.min(best, axis=0):  # else nothing here makes the cut
            ascending = tl.sort(tl.reshape(chunk, [KP]), descending=False)
            best = tl.sort(tl.maximum(best, ascending), descending=True)
    tl.store(cand_ptr + t * stride_ct + split * KP + tl.arange(0, KP), best)


# Triton resolves module globals named in a kernel at compile time; a plain int is a constant.
_EMPTY_KEY_CONST = tl.constexpr(EMPTY_KEY) if tl.constexpr is not None else EMPTY_KEY
_FUSED_KERNEL = TritonKernel(_fused_topk_kernel)


def fused_topk_meta(num_heads: int, head_dim: int, topk: int, dtype: torch.dtype, fp8: bool, num_scales: int = 1) -> dict:
    """Compile-time constants and launch options (also used by the AOT compile test). Untuned; at
    GLM-5 shapes (32 heads, dim 128, k 2048) this compiles for sm_90 to 254 registers and no spills
    for FP8 keys, 24 bytes of spills for bf16 (the two 2048-key int64 lists and their sorts take
    most registers); 8 warps or 64-key sub-blocks spill hundreds of bytes."""
    kp = max(16, next_pow2(topk))
    block_s = min(128, kp)
    return dict(
        FP8=fp8, NUM_SCALES=num_scales, BLOCK_S=block_s, NSUB=kp // block_s,
        BLOCK_H=max(16, next_pow2(num_heads)), BLOCK_D=max(16, next_pow2(head_dim)),
        DOT_PRECISION=dot_precision(dtype), num_warps=4,
    )  # fmt: skip


@functools.lru_cache(maxsize=None)
def _sm_count(device_index: int) -> int:
    return torch.cuda.get_device_properties(device_index).multi_processor_count


def choose_num_splits(device: torch.device, T: int, S: int, kp: int) -> int:
    """Enough splits of each token's keys for about two programs per SM, each at least KP keys."""
    if device.type != "cuda":
        return min(4, cdiv(S, kp))
    sms = _sm_count(device.index if device.index is not None else torch.cuda.current_device())
    return max(1, min(cdiv(S, kp), cdiv(2 * sms, max(1, T))))


def _merge(cand: torch.Tensor, k: int, key_slots: torch.Tensor, query_seq: torch.Tensor) -> IndexerTopk:
    S = key_slots.shape[1]
    top = cand.view(cand.shape[0], -1).topk(k, dim=1).values  # sorted: highest score first
    valid = (top >> 32) > _NEG_INF_ORDERED
    pos = (S - 1) - (top & 0xFFFFFFFF)
    positions = torch.where(valid, pos, -1)
    slots = key_slots[query_seq.long()].gather(1, pos.clamp(0, S - 1))
    return IndexerTopk(positions=positions.to(torch.int32), slots=torch.where(valid, slots, -1).to(torch.int32))


def _launch(q, weights, keys, scales, key_slots, query_seq, query_pos, topk, softmax_scale, fp8, layout, num_splits):
    T, H, D = q.shape
    S = key_slots.shape[1]
    k = min(topk, S)
    if T == 0 or k == 0:
        empty = torch.full((T, k), -1, dtype=torch.int32, device=q.device)
        return IndexerTopk(positions=empty, slots=empty.clone())
    meta = fused_topk_meta(H, D, k, q.dtype, fp8, num_scale_blocks(D))
    kp = meta["NSUB"] * meta["BLOCK_S"]
    splits = num_splits or choose_num_splits(q.device, T, S, kp)
    per_split = cdiv(cdiv(S, splits), kp) * kp
    splits = cdiv(S, per_split)
    cand = torch.empty((T, splits, kp), dtype=torch.int64, device=q.device)
    q = q if q.stride(-1) == 1 else q.contiguous()
    weights, key_slots = weights.contiguous(), key_slots.contiguous()
    _FUSED_KERNEL.launch(
        (T, splits),
        q, weights, keys, scales, key_slots, query_seq.contiguous(), query_pos.contiguous(), cand,
        S, H, D, float(softmax_scale), per_split, *layout,
        q.stride(0), q.stride(1), weights.stride(0), key_slots.stride(0), cand.stride(0),
        device=q.device, **meta,
    )  # fmt: skip
    return _merge(cand, k, key_slots, query_seq)


def indexer_topk_fused_triton(q, weights, index_keys, key_slots, query_seq, query_pos, topk, softmax_scale,
                              num_splits: int | None = None) -> IndexerTopk:  # fmt: skip
    """Triton, model-dtype keys [num_slots, D] (or paged): same contract as ``indexer_topk``."""
    keys = index_keys.reshape(-1, q.shape[-1])
    layout = (1, q.shape[-1], 0, 0)  # a slot is its own one-row page
    return _launch(q, weights, keys, keys, key_slots, query_seq, query_pos, topk, softmax_scale, False, layout, num_splits)


def indexer_topk_fp8_triton(q, weights, key_pages, page_size, key_slots, query_seq, query_pos, topk, softmax_scale,
                            num_splits: int | None = None) -> IndexerTopk:  # fmt: skip
    """Triton over FP8 indexer pages (uint8 [num_pages, page_bytes]); keys dequantized in registers."""
    D = q.shape[-1]
    if (page_size * D) % 4:
        raise ValueError(f"page_size={page_size} x dim {D}: the scales must start at a 4-byte boundary")
    page_bytes = key_pages.shape[1]
    layout = (page_size, page_bytes, page_bytes // 4, page_size * D // 4)
    values, scales = key_pages.view(E4M3), key_pages.view(torch.float32)
    return _launch(q, weights, values, scales, key_slots, query_seq, query_pos, topk, softmax_scale, True, layout, num_splits)


def indexer_topk_fp8_torch(q, weights, key_pages, page_size, key_slots, query_seq, query_pos, topk, softmax_scale) -> IndexerTopk:
    """Reference: dequantize every visible key into a [B * S, D] buffer, then ``indexer_topk`` (torch)."""
    flat = key_slots.reshape(-1).long()
    keys = dequantize_indexer_keys(key_pages, page_size, q.shape[-1], q.dtype, flat.clamp_min(0))
    local = torch.arange(flat.numel(), device=q.device).view_as(key_slots)
    local_slots = torch.where(key_slots >= 0, local, -1).to(torch.int32)
    sel = indexer_topk(q, weights, keys, local_slots, query_seq, query_pos, topk, softmax_scale, backend="torch")
    slots = torch.where(sel.slots >= 0, flat[sel.slots.clamp_min(0).long()], -1).to(torch.int32)
    return IndexerTopk(positions=sel.positions, slots=slots)


def indexer_topk_fp8(q, weights, key_pages, page_size: int, key_slots, query_seq, query_pos, topk: int,
                     softmax_scale: float, *, backend: str = "auto") -> IndexerTopk:  # fmt: skip
    """``indexer_topk`` over FP8 indexer pages (kernels/fp8_cache.py layout, keys Hadamard-rotated:
    pass q rotated the same way). q [T, H, D] in the model dtype; key_pages uint8 [num_pages,
    page_size * (D + 4 * ceil(D / 128))]."""
    if topk <= 0:
        raise ValueError(f"topk={topk}: expected a positive integer")
    dims = check_tensor("q", q, ["T", "H", "D"], FLOAT_DTYPES)
    check_tensor("weights", weights, ["T", "H"], (torch.float32,), dims)
    check_tensor("key_slots", key_slots, ["B", "S"], INDEX_DTYPES, dims)
    check_tensor("query_seq", query_seq, ["T"], INDEX_DTYPES, dims)
    check_tensor("query_pos", query_pos, ["T"], INDEX_DTYPES, dims)
    check_indexer_pages(key_pages, page_size, dims["D"])
    device = check_same_device(q=q, weights=weights, key_pages=key_pages, key_slots=key_slots,
                               query_seq=query_seq, query_pos=query_pos)  # fmt: skip
    impl = indexer_topk_fp8_triton if resolve_backend(backend, device) == "triton" else indexer_topk_fp8_torch
    return impl(q, weights, key_pages, page_size, key_slots, query_seq, query_pos, topk, softmax_scale)

