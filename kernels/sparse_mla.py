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

import torch

from kernels.backend import TritonKernel, cdiv, dot_precision, next_pow2, resolve_backend, tl
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
    q_ptr, rows_ptr, slots_ptr, out_ptr, lse_ptr,
    H, K, softmax_scale,
    stride_qt, stride_qh, stride_st, stride_ot, stride_oh, stride_lt,
    RANK: tl.constexpr, ROPE: tl.constexpr,
    BLOCK_H: tl.constexpr, BLOCK_K: tl.constexpr, BLOCK_R: tl.constexpr, BLOCK_P: tl.constexpr,
    DOT_PRECISION: tl.constexpr, UPCAST: tl.constexpr,
):  # fmt: skip
    # One program: one query token x BLOCK_H heads. All heads share the token's selected rows, so a
    # gathered block of rows is used by BLOCK_H heads for both QK^T and PV.
    t = tl.program_id(0)
    offs_h = tl.program_id(1) * BLOCK_H + tl.arange(0, BLOCK_H)
    offs_r = tl.arange(0, BLOCK_R)
    offs_p = tl.arange(0, BLOCK_P)
    h_ok = offs_h < H
    r_ok = offs_r < RANK
    p_ok = offs_p < ROPE
    row_width = RANK + ROPE

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
    for k0 in range(0, K, BLOCK_K):
        offs_k = k0 + tl.arange(0, BLOCK_K)
        slots = tl.load(slots_ptr + t * stride_st + offs_k, mask=offs_k < K, other=-1).to(tl.int64)
        valid = slots >= 0
        row_base = rows_ptr + slots[:, None] * row_width
        lat = tl.load(row_base + offs_r[None, :], mask=valid[:, None] & r_ok[None, :], other=0.0)
        pe = tl.load(row_base + RANK + offs_p[None, :], mask=valid[:, None] & p_ok[None, :], other=0.0)
        if UPCAST:
            lat = lat.to(tl.float32)
            pe = pe.to(tl.float32)
        scores = tl.dot(q_lat, tl.trans(lat), input_precision=DOT_PRECISION) + tl.dot(
            q_pe, tl.trans(pe), input_precision=DOT_PRECISION
        )  # [BLOCK_H, BLOCK_K]
        scores = tl.where(valid[None, :], scores * softmax_scale, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(scores, axis=1))
        alpha = tl.exp(m_i - m_new)
        p = tl.exp(scores - m_new[:, None])
        l_i = l_i * alpha + tl.sum(p, axis=1)
        acc = acc * alpha[:, None] + tl.dot(p.to(lat.dtype), lat, input_precision=DOT_PRECISION)
        m_i = m_new

    has_keys = l_i > 0.0
    out = acc / tl.where(has_keys, l_i, 1.0)[:, None]
    out_ptrs = out_ptr + t * stride_ot + offs_h[:, None] * stride_oh + offs_r[None, :]
    tl.store(out_ptrs, out.to(out_ptr.dtype.element_ty), mask=h_ok[:, None] & r_ok[None, :])
    lse = tl.where(has_keys, m_i + tl.log(tl.where(has_keys, l_i, 1.0)), float("-inf"))
    tl.store(lse_ptr + t * stride_lt + offs_h, lse, mask=h_ok)


_SPARSE_MLA_KERNEL = TritonKernel(_sparse_mla_kernel)


def sparse_mla_meta(num_heads: int, kv_lora_rank: int, rope_dim: int, dtype: torch.dtype, block_k: int = 32) -> dict:
    """Compile-time constants and launch options (also used by the AOT compile test).

    At GLM-5 widths (512 + 64) the fp32 accumulator is BLOCK_H x 512: with 8 warps, BLOCK_H=16 and
    BLOCK_K=32 compile for sm_90 to 128 registers and no spills (4 warps spill at 255). More heads
    per program (32) halve how often each selected row is gathered. Untuned: no GPU yet.
    """
    return dict(
        RANK=kv_lora_rank, ROPE=rope_dim,
        BLOCK_H=16 if num_heads <= 16 else 32, BLOCK_K=block_k,
        BLOCK_R=max(16, next_pow2(kv_lora_rank)), BLOCK_P=max(16, next_pow2(rope_dim)),
        DOT_PRECISION=dot_precision(dtype), num_warps=8, num_stages=2,
    )  # fmt: skip


def sparse_mla_triton(
    q: torch.Tensor,
    latent_cache: torch.Tensor,
    topk_slots: torch.Tensor,
    softmax_scale: float,
    kv_lora_rank: int,
    block_k: int = 32,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Triton: (out [T, H, kv_lora_rank] in q's dtype, lse [T, H] fp32); same contract as the reference."""
    T, H, width = q.shape
    rope = width - kv_lora_rank
    rows = latent_cache.reshape(-1, width)
    q = q if q.stride(-1) == 1 else q.contiguous()
    topk_slots = topk_slots.contiguous()
    out = torch.empty((T, H, kv_lora_rank), dtype=q.dtype, device=q.device)
    lse = torch.empty((T, H), dtype=torch.float32, device=q.device)
    if T == 0:
        return out, lse
    meta = sparse_mla_meta(H, kv_lora_rank, rope, q.dtype, block_k)
    grid = (T, cdiv(H, meta["BLOCK_H"]))
    _SPARSE_MLA_KERNEL.launch(
        grid,
        q, rows, topk_slots, out, lse,
        H, topk_slots.shape[1], float(softmax_scale),
        q.stride(0), q.stride(1), topk_slots.stride(0), out.stride(0), out.stride(1), lse.stride(0),
        device=q.device, **meta,
    )  # fmt: skip
    return out, lse


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
