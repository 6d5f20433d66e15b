"""Weight-absorbed sparse MLA attention over selected rows of a paged latent cache (GLM-5 DSA).

Each query token t attends, with every head h, over the K cache rows named by topk_slots[t]
(slot = page * page_size + offset; -1 = masked). A cache row is [c (kv_lora_rank) | k_pe (rope)]
and the query is [q_nope absorbed through W_UK (kv_lora_rank) | q_pe (rope)], so

    score[t, h, j] = (q[t, h, :] . row[slot_j, :]) * softmax_scale
    out[t, h, :]   = softmax_j(score) @ row[slot_j, :kv_lora_rank]

The output stays in latent space [T, H, kv_lora_rank]; the caller applies W_UV and o_proj.
A token whose slots are all -1 gets zeros (and lse = -inf). The Triton kernel streams the selected
rows in blocks with an online softmax, so it never materializes the [K, row] gather.
"""

from __future__ import annotations

import functools

import torch

from kernels.backend import TritonKernel, cdiv, dot_precision, next_pow2, resolve_backend, tl
from kernels.online_softmax import online_softmax_step
from kernels.validate import FLOAT_DTYPES, INDEX_DTYPES, check_same_device, check_tensor, flat_rows

# The reference gathers [tokens, K, row] in fp32: chunk query tokens to bound that.
REFERENCE_CHUNK_ELEMS = 1 << 25


def sparse_mla_torch(
    q: torch.Tensor,
    latent_cache: torch.Tensor,
    topk_slots: torch.Tensor,
    softmax_scale: float,
    kv_lora_rank: int,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Reference: (out [T, H, kv_lora_rank] in q's dtype, lse [T, H] fp32)."""
    T, H, width = q.shape
    rows = latent_cache.reshape(-1, width)
    out = torch.zeros((T, H, kv_lora_rank), dtype=q.dtype, device=q.device)
    lse = torch.full((T, H), float("-inf"), dtype=torch.float32, device=q.device)
    K = topk_slots.shape[1]
    chunk = max(1, REFERENCE_CHUNK_ELEMS // max(1, K * width))
    for start in range(0, T, chunk):
        end = min(T, start + chunk)
        slots = topk_slots[start:end].long()
        valid = slots >= 0
        kv = rows[slots.clamp(min=0)].float()  # [t, K, width]
        scores = torch.einsum("thd,tkd->thk", q[start:end].float(), kv) * softmax_scale
        scores = scores.masked_fill(~valid[:, None, :], float("-inf"))
        chunk_lse = torch.logsumexp(scores, dim=-1)  # -inf for fully masked tokens
        probs = torch.exp(scores - chunk_lse[..., None]).nan_to_num(0.0)
        out[start:end] = torch.einsum("thk,tkr->thr", probs, kv[..., :kv_lora_rank]).to(q.dtype)
        lse[start:end] = chunk_lse
    return out, lse


def _sparse_mla_kernel(
    q_ptr, lat_ptr, scale_ptr, pe_ptr, slots_ptr, out_ptr, lse_ptr,
    H, K, K_PER_SPLIT, softmax_scale, lat_stride, scale_stride, scale_off, pe_stride, pe_off,
    stride_qt, stride_qh, stride_st, stride_os, stride_ot, stride_oh, stride_ls, stride_lt,
    RANK: tl.constexpr, ROPE: tl.constexpr, FP8: tl.constexpr,
    BLOCK_H: tl.constexpr, BLOCK_K: tl.constexpr, BLOCK_R: tl.constexpr, BLOCK_P: tl.constexpr,
    DOT_PRECISION: tl.constexpr, UPCAST: tl.constexpr,
):  # fmt: skip
    # One program: one query token x BLOCK_H heads x one split of its selected rows. All heads share
    # the token's rows, so a gathered block of rows serves BLOCK_H heads for both QK^T and PV.
    # Splits (program_id 2) write partial (out, lse) that the launcher merges: small decode batches
    # would otherwise leave most SMs idle. A row is [latent | rope] at lat_ptr / pe_ptr (+ pe_off)
    # with its own row stride each: a model-dtype cache passes one tensor twice; an fp8_ds_mla
    # cache passes its bytes as e4m3, as fp32 (the scales) and as the model dtype (the rope), and
    # only the gathered rows are dequantized, here in registers.
    t = tl.program_id(0)
    offs_h = tl.program_id(1) * BLOCK_H + tl.arange(0, BLOCK_H)
    split = tl.program_id(2)
    k_start = split * K_PER_SPLIT
    k_end = tl.minimum(K, k_start + K_PER_SPLIT)
    offs_r = tl.arange(0, BLOCK_R)
    offs_p = tl.arange(0, BLOCK_P)
    h_ok = offs_h < H
    r_ok = offs_r < RANK
    p_ok = offs_p < ROPE

    q_base = q_ptr + t * stride_qt + offs_h[:, None] * stride_qh
    q_lat = tl.load(q_base + offs_r[None, :], mask=h_ok[:, None] & r_ok[None, :], other=0.0)
    q_pe = tl.load(q_base + RANK + offs_p[None, :], mask=h_ok[:, None] & p_ok[None, :], other=0.0)
    if UPCAST:
        q_lat = q_lat.to(tl.float32)
        q_pe = q_pe.to(tl.float32)

    # Finite start so that a block with every slot masked gives exp(-inf - m) = 0, never NaN.
    m_i = tl.full([BLOCK_H], -1.0e30, dtype=tl.float32)
    l_i = tl.zeros([BLOCK_H], dtype=tl.float32)
    acc = tl.zeros([BLOCK_H, BLOCK_R], dtype=tl.float32)
    for k0 in range(k_start, k_end, BLOCK_K):
        offs_k = k0 + tl.arange(0, BLOCK_K)
        slots = tl.load(slots_ptr + t * stride_st + offs_k, mask=offs_k < k_end, other=-1).to(tl.int64)
        valid = slots >= 0
        lat_mask = valid[:, None] & r_ok[None, :]
        lat = tl.load(lat_ptr + slots[:, None] * lat_stride + offs_r[None, :], mask=lat_mask, other=0.0)
        if FP8:  # e4m3 x its 128-value block's fp32 scale, rounded to q's dtype (as dequantize_blocks)
            # One scale per (row, block), broadcast over the block: a [BLOCK_K, BLOCK_R] scale tile
            # would cost as many registers as the latent itself.
            GROUP: tl.constexpr = 128 if BLOCK_R >= 128 else BLOCK_R
            offs_g = tl.arange(0, BLOCK_R // GROUP)
            s_ptrs = scale_ptr + slots[:, None] * scale_stride + scale_off + offs_g[None, :]
            scales = tl.load(s_ptrs, mask=valid[:, None] & (offs_g[None, :] * GROUP < RANK), other=0.0)
            lat = tl.reshape(lat.to(tl.float32), [BLOCK_K, BLOCK_R // GROUP, GROUP]) * scales[:, :, None]
            lat = tl.reshape(lat, [BLOCK_K, BLOCK_R]).to(q_ptr.dtype.element_ty)
        pe_ptrs = pe_ptr + slots[:, None] * pe_stride + pe_off + offs_p[None, :]
        pe = tl.load(pe_ptrs, mask=valid[:, None] & p_ok[None, :], other=0.0)
        if UPCAST:
            lat = lat.to(tl.float32)
            pe = pe.to(tl.float32)
        scores = tl.dot(q_lat, tl.trans(lat), input_precision=DOT_PRECISION) + tl.dot(
            q_pe, tl.trans(pe), input_precision=DOT_PRECISION
        )  # [BLOCK_H, BLOCK_K]
        scores = tl.where(valid[None, :], scores * softmax_scale, float("-inf"))
        m_i, l_i, acc = online_softmax_step(m_i, l_i, acc, scores, lat, DOT_PRECISION)

    has_keys = l_i > 0.0
    out = acc / tl.where(has_keys, l_i, 1.0)[:, None]
    out_ptrs = out_ptr + split * stride_os + t * stride_ot + offs_h[:, None] * stride_oh + offs_r[None, :]
    tl.store(out_ptrs, out.to(out_ptr.dtype.element_ty), mask=h_ok[:, None] & r_ok[None, :])
    lse = tl.where(has_keys, m_i + tl.log(tl.where(has_keys, l_i, 1.0)), float("-inf"))
    tl.store(lse_ptr + split * stride_ls + t * stride_lt + offs_h, lse, mask=h_ok)


_SPARSE_MLA_KERNEL = TritonKernel(_sparse_mla_kernel)


def sparse_mla_meta(
    num_heads: int, kv_lora_rank: int, rope_dim: int, dtype: torch.dtype, block_k: int = 32, fp8: bool = False
) -> dict:
    """Compile-time constants and launch options (also used by the AOT compile test).

    At GLM-5 widths (512 + 64) the fp32 accumulator is BLOCK_H x 512: with 8 warps, BLOCK_H=16 and
    BLOCK_K=32 compile for sm_90 to 128 registers and no spills (4 warps spill at 255). More heads
    per program (32) halve how often each selected row is gathered. FP8 rows keep 16 heads: their
    in-register dequantization spills at 32 (255 registers), and compiles to 218 without spills at 16.
    Untuned: no GPU yet.
    """
    return dict(
        RANK=kv_lora_rank, ROPE=rope_dim, FP8=fp8,
        BLOCK_H=16 if num_heads <= 16 or fp8 else 32, BLOCK_K=block_k,
        BLOCK_R=max(16, next_pow2(kv_lora_rank)), BLOCK_P=max(16, next_pow2(rope_dim)),
        DOT_PRECISION=dot_precision(dtype), num_warps=8, num_stages=2,
    )  # fmt: skip


@functools.lru_cache(maxsize=None)
def _sm_count(device_index: int) -> int:
    return torch.cuda.get_device_properties(device_index).multi_processor_count


def choose_num_splits(device: torch.device, programs: int, K: int, block_k: int) -> int:
    """Enough splits of the selected rows to give every SM about two programs, keeping at least
    four row blocks per split (fewer would make the merge cost more than it saves)."""
    if device.type != "cuda":
        return 1
    sms = _sm_count(device.index if device.index is not None else torch.cuda.current_device())
    return max(1, min(cdiv(2 * sms, max(1, programs)), cdiv(K, 4 * block_k), 16))


def sparse_mla_triton(
    q: torch.Tensor,
    latent_cache: torch.Tensor,
    topk_slots: torch.Tensor,
    softmax_scale: float,
    kv_lora_rank: int,
    block_k: int = 32,
    num_splits: int | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Triton: (out [T, H, kv_lora_rank] in q's dtype, lse [T, H] fp32); same contract as the reference.

    num_splits: how many programs share one token's selected rows (default: ``choose_num_splits``).
    """
    width = q.shape[-1]
    rows = latent_cache.reshape(-1, width)
    views = (rows, rows, rows, width, 0, 0, width, kv_lora_rank)
    return launch_sparse_mla(q, views, topk_slots, softmax_scale, kv_lora_rank, False, block_k, num_splits)


def launch_sparse_mla(q, views, topk_slots, softmax_scale, kv_lora_rank, fp8, block_k=32, num_splits=None):
    """Run the kernel over rows described by ``views`` = (latent, scales, rope tensors, latent row
    stride, scale row stride, scale offset, rope row stride, rope offset), strides in elements."""
    T, H, width = q.shape
    K = topk_slots.shape[1]
    rope = width - kv_lora_rank
    q = q if q.stride(-1) == 1 else q.contiguous()
    topk_slots = topk_slots.contiguous()
    meta = sparse_mla_meta(H, kv_lora_rank, rope, q.dtype, block_k, fp8)
    head_blocks = cdiv(H, meta["BLOCK_H"])
    if num_splits is None:
        num_splits = choose_num_splits(q.device, T * head_blocks, K, block_k)
    k_per_split = cdiv(cdiv(max(K, 1), num_splits), block_k) * block_k
    num_splits = max(1, cdiv(K, k_per_split))
    if num_splits == 1:  # write the final result directly
        out = torch.empty((1, T, H, kv_lora_rank), dtype=q.dtype, device=q.device)
    else:  # fp32 partials, merged below
        out = torch.empty((num_splits, T, H, kv_lora_rank), dtype=torch.float32, device=q.device)
    lse = torch.empty((num_splits, T, H), dtype=torch.float32, device=q.device)
    if T > 0:
        lat, scales, pe, *strides = views
        _SPARSE_MLA_KERNEL.launch(
            (T, head_blocks, num_splits),
            q, lat, scales, pe, topk_slots, out, lse,
            H, K, k_per_split, float(softmax_scale), *strides,
            q.stride(0), q.stride(1), topk_slots.stride(0),
            out.stride(0), out.stride(1), out.stride(2), lse.stride(0), lse.stride(1),
            device=q.device, **meta,
        )  # fmt: skip
    if num_splits == 1:
        return out[0], lse[0]
    total_lse = torch.logsumexp(lse, dim=0)  # -inf where no split saw a key
    weights = torch.exp(lse - total_lse).nan_to_num(0.0)  # (-inf) - (-inf) -> 0
    return (weights[..., None] * out).sum(0).to(q.dtype), total_lse


def sparse_mla_attention(
    q: torch.Tensor,
    latent_cache: torch.Tensor,
    topk_slots: torch.Tensor,
    softmax_scale: float,
    kv_lora_rank: int,
    *,
    backend: str = "auto",
) -> tuple[torch.Tensor, torch.Tensor]:
    """Sparse MLA attention in latent space; returns (out [T, H, kv_lora_rank], lse [T, H] fp32).

    q [T, H, kv_lora_rank + rope_dim] = [absorbed q_nope | q_pe]; latent_cache [num_pages,
    page_size, kv_lora_rank + rope_dim] (or flat [num_slots, ...]) of q's dtype; topk_slots [T, K]
    cache slots to attend to (-1 = masked), e.g. ``IndexerTopk.slots``.
    """
    dims = check_tensor("q", q, ["T", "H", "W"], FLOAT_DTYPES)
    check_tensor("topk_slots", topk_slots, ["T", "K"], INDEX_DTYPES, dims)
    if not 0 < kv_lora_rank < dims["W"]:
        raise ValueError(f"kv_lora_rank={kv_lora_rank}: expected 0 < kv_lora_rank < q.shape[-1] ({dims['W']})")
    if latent_cache.dtype != q.dtype:
        raise ValueError(f"latent_cache: dtype {latent_cache.dtype}, expected the dtype of q ({q.dtype})")
    flat_rows("latent_cache", latent_cache, dims["W"])
    device = check_same_device(q=q, latent_cache=latent_cache, topk_slots=topk_slots)
    impl = sparse_mla_triton if resolve_backend(backend, device) == "triton" else sparse_mla_torch
    return impl(q, latent_cache, topk_slots, softmax_scale, kv_lora_rank)
