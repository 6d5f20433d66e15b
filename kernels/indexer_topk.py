"""Lightning-indexer scoring and top-k selection over a paged indexer-key cache (GLM-5 DSA).

For query token t (of sequence b = query_seq[t], at absolute position p = query_pos[t]) and key
position s of that sequence (cached at slot key_slots[b, s]):

    score[t, s] = sum_h  w[t, h] * relu(q[t, h, :] . k[slot, :] * softmax_scale)

masked to -inf where s > p (causal) or the slot is -1 (no key). ``w`` is the caller's
``weights_proj(x) * n_heads**-0.5`` in fp32 and ``softmax_scale`` is index_head_dim**-0.5, exactly
as transformers' ``GlmMoeDsaIndexer`` computes it. RoPE is the caller's job (q and the cached keys
are already rotated).

The top-k ranks like ``stable_topk`` in both backends (exact ties go to the earlier position, so
prefill and decode pick the same keys). The torch reference materializes scores per chunk of query
tokens (bounded by ``max_chunk_elems``); on Triton ``indexer_topk`` is the fused streaming kernel
of kernels/indexer_topk_fused.py, which never writes the scores. ``indexer_scores`` (the scores
themselves) stays for tests and benchmarks.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from kernels.backend import TritonKernel, cdiv, dot_precision, next_pow2, resolve_backend, tl
from kernels.grouped_blocks import group_into_blocks
from kernels.validate import FLOAT_DTYPES, INDEX_DTYPES, check_same_device, check_tensor, flat_rows

# Chunk query tokens so that one chunk's working set (fp32 values) stays bounded.
DEFAULT_MAX_CHUNK_ELEMS = 1 << 26


@dataclass(frozen=True)
class IndexerTopk:
    """Selected keys per query token: both [T, k] int32, -1 where fewer than k keys are visible."""

    positions: torch.Tensor  # key positions within the sequence (what transformers returns)
    slots: torch.Tensor  # cache slots of those keys (what the sparse MLA kernel gathers)


def stable_topk(scores: torch.Tensor, k: int) -> torch.Tensor:
    """Indices of the k largest fp32 scores along the last dim; exact ties go to the earlier position.

    Ties are common, not a corner case: a key whose every head is ReLU-clipped scores exactly 0,
    and masked keys are all -inf. torch.topk breaks ties differently for different shapes and
    devices, which would make a prefill and a token-by-token decode of the same text select
    different keys. Ranking on one 64-bit key (order-preserving int of the float, then reversed
    position) makes the choice shape-independent.
    """
    bits = (scores.float() + 0.0).view(torch.int32)  # + 0.0 turns -0.0 into 0.0
    ordered = torch.where(bits < 0, bits ^ 0x7FFFFFFF, bits).to(torch.int64)
    pos = torch.arange(scores.shape[-1], device=scores.device, dtype=torch.int64)
    key = (ordered << 32) | (scores.shape[-1] - 1 - pos)
    return key.topk(k, dim=-1).indices


def _check_inputs(q, weights, index_keys, key_slots, query_seq, query_pos):
    dims = check_tensor("q", q, ["T", "H", "D"], FLOAT_DTYPES)
    check_tensor("weights", weights, ["T", "H"], (torch.float32,), dims)
    check_tensor("key_slots", key_slots, ["B", "S"], INDEX_DTYPES, dims)
    check_tensor("query_seq", query_seq, ["T"], INDEX_DTYPES, dims)
    check_tensor("query_pos", query_pos, ["T"], INDEX_DTYPES, dims)
    if index_keys.dtype != q.dtype:
        raise ValueError(f"index_keys: dtype {index_keys.dtype}, expected the dtype of q ({q.dtype})")
    keys = flat_rows("index_keys", index_keys, dims["D"])
    device = check_same_device(
        q=q, weights=weights, index_keys=index_keys, key_slots=key_slots, query_seq=query_seq, query_pos=query_pos
    )
    return keys, dims, device


def indexer_scores_torch(
    q: torch.Tensor,
    weights: torch.Tensor,
    index_keys: torch.Tensor,
    key_slots: torch.Tensor,
    query_seq: torch.Tensor,
    query_pos: torch.Tensor,
    softmax_scale: float,
) -> torch.Tensor:
    """Reference: [T, S] fp32 scores, -inf where masked."""
    keys = index_keys.reshape(-1, q.shape[-1])
    slots = key_slots[query_seq.long()].long()  # [T, S]
    k = keys[slots.clamp(min=0)].float()  # [T, S, D]
    logits = torch.einsum("thd,tsd->ths", q.float(), k) * softmax_scale
    scores = torch.einsum("th,ths->ts", weights, torch.relu(logits))
    key_pos = torch.arange(slots.shape[1], device=q.device)
    visible = (slots >= 0) & (key_pos[None, :] <= query_pos.long()[:, None])
    return scores.masked_fill(~visible, float("-inf"))


def _indexer_scores_kernel(
    q_ptr, w_ptr, keys_ptr, key_slots_ptr, block_tokens_ptr, block_seq_ptr, query_pos_ptr, out_ptr,
    T, S, H, D, softmax_scale,
    stride_qt, stride_qh, stride_wt, stride_slots_b, stride_out_t,
    BLOCK_T: tl.constexpr, BLOCK_S: tl.constexpr, BLOCK_H: tl.constexpr, BLOCK_D: tl.constexpr,
    DOT_PRECISION: tl.constexpr, UPCAST: tl.constexpr,
):  # fmt: skip
    # One program: BLOCK_T query tokens of ONE sequence x BLOCK_S of its key positions, all heads.
    # The gathered key block is read once for all of them: rows (token, head) of q form one
    # [BLOCK_T * BLOCK_H, D] x [D, BLOCK_S] dot. BLOCK_T > 1 serves prefill chunks and MTP verify.
    blk = tl.program_id(0)
    s_block = tl.program_id(1)
    seq = tl.load(block_seq_ptr + blk)
    if seq < 0:  # an unused block of the routing-independent layout
        return
    offs_s = s_block * BLOCK_S + tl.arange(0, BLOCK_S)
    in_range = offs_s < S
    slots = tl.load(key_slots_ptr + seq.to(tl.int64) * stride_slots_b + offs_s, mask=in_range, other=-1).to(tl.int64)

    offs_t = tl.arange(0, BLOCK_T)
    tokens = tl.load(block_tokens_ptr + blk * BLOCK_T + offs_t)  # T marks padding
    t_ok = tokens < T
    pos = tl.load(query_pos_ptr + tokens, mask=t_ok, other=-1)
    # Keys past every token's causal frontier are never read: such blocks cost no memory traffic.
    wanted = in_range & (slots >= 0) & (offs_s <= tl.max(pos, axis=0))

    offs_r = tl.arange(0, BLOCK_T * BLOCK_H)
    r_tok = tl.load(block_tokens_ptr + blk * BLOCK_T + offs_r // BLOCK_H)
    r_head = offs_r % BLOCK_H
    r_ok = (r_tok < T) & (r_head < H)
    r_tok = r_tok.to(tl.int64)
    offs_d = tl.arange(0, BLOCK_D)
    d_ok = offs_d < D
    q = tl.load(
        q_ptr + r_tok[:, None] * stride_qt + r_head[:, None] * stride_qh + offs_d[None, :],
        mask=r_ok[:, None] & d_ok[None, :],
        other=0.0,
    )
    k = tl.load(keys_ptr + slots[None, :] * D + offs_d[:, None], mask=wanted[None, :] & d_ok[:, None], other=0.0)
    k = k.to(q.dtype)
    if UPCAST:
        q = q.to(tl.float32)
        k = k.to(tl.float32)
    logits = tl.maximum(tl.dot(q, k, input_precision=DOT_PRECISION) * softmax_scale, 0.0)  # [T*H, S] fp32
    w = tl.load(w_ptr + r_tok * stride_wt + r_head, mask=r_ok, other=0.0)
    score = tl.sum(tl.reshape(logits * w[:, None], (BLOCK_T, BLOCK_H, BLOCK_S)), axis=1)  # [BLOCK_T, BLOCK_S]
    visible = wanted[None, :] & (offs_s[None, :] <= pos[:, None])
    score = tl.where(visible, score, float("-inf"))
    out_ptrs = out_ptr + tokens[:, None].to(tl.int64) * stride_out_t + offs_s[None, :]
    tl.store(out_ptrs, score, mask=t_ok[:, None] & in_range[None, :])


_SCORES_KERNEL = TritonKernel(_indexer_scores_kernel)
MAX_BLOCK_T = 4


def indexer_scores_meta(num_heads: int, head_dim: int, dtype: torch.dtype, block_t: int = 1) -> dict:
    """Compile-time constants and launch options of the scoring kernel (also used by the AOT compile test).

    Keeps BLOCK_T x BLOCK_H x BLOCK_S (the fp32 logits tile) at 16K values so it stays in registers;
    for decode (BLOCK_T=1, 32 heads) that is BLOCK_S=128 keys per q load. Untuned: no GPU yet.
    """
    block_h = max(16, next_pow2(num_heads))
    block_s = max(16, min(128, 16384 // (block_t * block_h)))
    return dict(
        BLOCK_T=block_t, BLOCK_S=block_s, BLOCK_H=block_h, BLOCK_D=max(16, next_pow2(head_dim)),
        DOT_PRECISION=dot_precision(dtype), num_warps=4 if block_t == 1 else 8,
    )  # fmt: skip


def indexer_scores_triton(
    q: torch.Tensor,
    weights: torch.Tensor,
    index_keys: torch.Tensor,
    key_slots: torch.Tensor,
    query_seq: torch.Tensor,
    query_pos: torch.Tensor,
    softmax_scale: float,
    block_t: int | None = None,
) -> torch.Tensor:
    """Triton: [T, S] fp32 scores, -inf where masked (same contract as ``indexer_scores_torch``).

    block_t: query tokens of one sequence per program (1, 2 or 4); by default 1 when there are no
    more tokens than sequences (decode), else tokens-per-sequence rounded up to a power of two.
    """
    T, H, D = q.shape
    B, S = key_slots.shape
    if block_t is None:
        block_t = 1 if T <= B else min(MAX_BLOCK_T, next_pow2(cdiv(T, B)))
    out = torch.full((T, S), float("-inf"), dtype=torch.float32, device=q.device)
    if T == 0 or S == 0:
        return out
    # Query tokens grouped by sequence into blocks of block_t; the layout's size depends only on
    # (T, B, block_t), so this needs no host synchronization.
    blocks = group_into_blocks(query_seq.view(T, 1), B, block_t)
    meta = indexer_scores_meta(H, D, q.dtype, block_t)
    grid = (blocks.block_group.shape[0], cdiv(S, meta["BLOCK_S"]))
    q = q if q.stride(-1) == 1 else q.contiguous()
    weights, key_slots = weights.contiguous(), key_slots.contiguous()
    _SCORES_KERNEL.launch(
        grid,
        q, weights, index_keys.reshape(-1, D), key_slots, blocks.sorted_items, blocks.block_group,
        query_pos.contiguous(), out,
        T, S, H, D, float(softmax_scale),
        q.stride(0), q.stride(1), weights.stride(0), key_slots.stride(0), out.stride(0),
        device=q.device, **meta,
    )  # fmt: skip
    return out


def indexer_scores(
    q: torch.Tensor,
    weights: torch.Tensor,
    index_keys: torch.Tensor,
    key_slots: torch.Tensor,
    query_seq: torch.Tensor,
    query_pos: torch.Tensor,
    softmax_scale: float,
    *,
    backend: str = "auto",
) -> torch.Tensor:
    """Indexer scores [T, S] fp32 (-inf where masked); see the module docstring for the formula.

    q [T, H, D] (rotated); weights [T, H] fp32; index_keys [num_pages, page_size, D] (or flat
    [num_slots, D]) of q's dtype; key_slots [B, S] slot of each key position (-1 = none);
    query_seq [T] row of key_slots per token; query_pos [T] absolute position per token.
    """
    _, _, device = _check_inputs(q, weights, index_keys, key_slots, query_seq, query_pos)
    impl = indexer_scores_triton if resolve_backend(backend, device) == "triton" else indexer_scores_torch
    return impl(q, weights, index_keys, key_slots, query_seq, query_pos, softmax_scale)


def indexer_topk(
    q: torch.Tensor,
    weights: torch.Tensor,
    index_keys: torch.Tensor,
    key_slots: torch.Tensor,
    query_seq: torch.Tensor,
    query_pos: torch.Tensor,
    topk: int,
    softmax_scale: float,
    *,
    backend: str = "auto",
    max_chunk_elems: int = DEFAULT_MAX_CHUNK_ELEMS,
) -> IndexerTopk:
    """Top-k keys per query token by indexer score; k = min(topk, S) columns, -1 past the visible keys.

    Same inputs as ``indexer_scores``. Triton: the fused kernel (no score matrix at all). Torch:
    query tokens in chunks, so the score matrix of a long prefill never exists at once.
    """
    if topk <= 0:
        raise ValueError(f"topk={topk}: expected a positive integer")
    _, dims, device = _check_inputs(q, weights, index_keys, key_slots, query_seq, query_pos)
    if resolve_backend(backend, device) == "triton":  # scores and top-k in one pass, no [T, S] scores
        from kernels.indexer_topk_fused import indexer_topk_fused_triton

        return indexer_topk_fused_triton(q, weights, index_keys, key_slots, query_seq, query_pos, topk, softmax_scale)
    impl = indexer_scores_torch
    T, S = dims["T"], dims["S"]
    k = min(topk, S)
    positions = torch.full((T, k), -1, dtype=torch.int32, device=device)
    slots = torch.full((T, k), -1, dtype=torch.int32, device=device)
    if T == 0 or k == 0:
        return IndexerTopk(positions=positions, slots=slots)
    # The reference holds [tokens, S, max(H, D)] fp32 intermediates, the kernel only the scores.
    per_token = S * max(dims["H"], dims["D"])  # the reference holds [tokens, S, max(H, D)] fp32
    chunk = max(1, max_chunk_elems // max(1, per_token))
    for start in range(0, T, chunk):
        end = min(T, start + chunk)
        scores = impl(
            q[start:end], weights[start:end], index_keys, key_slots,
            query_seq[start:end], query_pos[start:end], softmax_scale,
        )  # fmt: skip
        idx = stable_topk(scores, k)
        valid = torch.isfinite(scores.gather(1, idx))
        chunk_slots = key_slots[query_seq[start:end].long()].gather(1, idx)
        positions[start:end] = torch.where(valid, idx, -1).to(torch.int32)
        slots[start:end] = torch.where(valid, chunk_slots, -1).to(torch.int32)
    return IndexerTopk(positions=positions, slots=slots)
