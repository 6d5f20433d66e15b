"""MLA attention in the expanded (non-absorbed) form, for prefill chunks.

The caller ran kv_b_proj over the keys of each sequence, packed: the key at position p of
sequence b is row key_start[b] + p of

    kv   [U, H, nope + v]   per-head k_nope | v (kv_b_proj's output viewed per head)
    k_pe [U, rope]          the rotated rope key, shared by every head

and the query is q [T, H, nope + rope] = [q_nope | q_pe] (rope applied). Query token t belongs to
sequence b = query_seq[t] at position query_pos[t]; it sees the keys p <= query_pos[t] and, when a
DSA selection is given, only those whose bit p is set in selection[t] (int32 words, bit p % 32 of
word p // 32: ``selection_bits``). Then

    score[t, h, p] = (q[t, h] . [k_nope[row, h] | k_pe[row]]) * softmax_scale,  row = key_start[b] + p
    out[t, h]      = softmax_p(score) @ v[row, h]          ([T, H, v] in q's dtype; zeros if no key)

The Triton kernel is flash attention over a tile of one sequence's query tokens and one head:
key blocks stream through an online softmax, each block read once for BLOCK_M queries (decode's
absorbed form reads every selected row once per query instead). k_nope and k_pe are loaded into
one [nope + rope, BLOCK_N] tile, so q . k is a single dot (256 wide at GLM-5 sizes, a power of
two: no padding lanes).
"""

from __future__ import annotations

import torch

from kernels.backend import TritonKernel, dot_precision, next_pow2, resolve_backend, tl
from kernels.grouped_blocks import block_items, group_into_blocks
from kernels.online_softmax import online_softmax_step
from kernels.validate import FLOAT_DTYPES, INDEX_DTYPES, check_same_device, check_tensor

# The reference gathers [tokens, keys, heads, nope + v] in fp32: chunk query tokens to bound that.
REFERENCE_CHUNK_ELEMS = 1 << 25
WORD_BITS = 32


def selection_bits(positions: torch.Tensor, num_keys: int) -> torch.Tensor:
    """[T, K] selected key positions (-1 = none) -> [T, ceil(num_keys / 32)] int32 bit words."""
    T = positions.shape[0]
    pos = positions.long()
    valid = (pos >= 0) & (pos < num_keys)
    bit = pos.clamp_min(0) % WORD_BITS
    # NOTE: positions of one row are distinct, so summing their bits is OR-ing them; bit 31 is the
    # int32 sign bit (-2**31) and the sum of the others stays below 2**31: no overflow.
    value = torch.where(bit == WORD_BITS - 1, -(2**31), 1 << bit.clamp_max(WORD_BITS - 2))
    words = torch.zeros((T, -(-num_keys // WORD_BITS)), dtype=torch.int32, device=positions.device)
    if T and words.shape[1]:
        words.scatter_add_(1, pos.clamp_min(0) // WORD_BITS, torch.where(valid, value, 0).to(torch.int32))
    return words


def _selected(bits: torch.Tensor, key_pos: torch.Tensor) -> torch.Tensor:
    """bits [t, W] int32, key_pos [S] -> [t, S] bool: is position p's bit set in each row."""
    words = bits.long()[:, key_pos // WORD_BITS]
    return ((words >> (key_pos % WORD_BITS)) & 1).bool()


def _zeros_out(q: torch.Tensor, kv: torch.Tensor, nope_dim: int) -> torch.Tensor:
    return torch.zeros((q.shape[0], q.shape[1], kv.shape[-1] - nope_dim), dtype=q.dtype, device=q.device)


def mla_prefill_torch(q, kv, k_pe, key_start, query_seq, query_pos, softmax_scale, nope_dim, selection=None):
    """Reference: per chunk of query tokens, gather each token's keys 0..max position and attend."""
    T, H, _ = q.shape
    out = _zeros_out(q, kv, nope_dim)
    if T == 0:
        return out
    S = int(query_pos.max()) + 1
    key_pos = torch.arange(S, device=q.device)
    chunk = max(1, REFERENCE_CHUNK_ELEMS // max(1, S * H * kv.shape[-1]))
    for start in range(0, T, chunk):
        end = min(T, start + chunk)
        rows = (key_start.long()[query_seq[start:end].long()][:, None] + key_pos).clamp(max=kv.shape[0] - 1)
        visible = key_pos[None, :] <= query_pos[start:end].long()[:, None]  # [t, S]
        if selection is not None:
            visible &= _selected(selection[start:end], key_pos)
        keys = kv[rows].float()  # [t, S, H, nope + v]
        k = torch.cat([keys[..., :nope_dim], k_pe[rows].float()[:, :, None, :].expand(-1, -1, H, -1)], dim=-1)
        scores = torch.einsum("thd,tshd->ths", q[start:end].float(), k) * softmax_scale
        probs = torch.softmax(scores.masked_fill(~visible[:, None, :], float("-inf")), dim=-1).nan_to_num(0.0)
        out[start:end] = torch.einsum("ths,tshd->thd", probs, keys[..., nope_dim:]).to(q.dtype)
    return out


def _mla_prefill_kernel(
    q_ptr, kv_ptr, pe_ptr, key_start_ptr, sorted_tokens_ptr, block_seq_ptr, query_pos_ptr, sel_ptr, out_ptr,
    T, softmax_scale,
    stride_qt, stride_qh, stride_kvu, stride_kvh, stride_pe, stride_sel, stride_ot, stride_oh,
    NOPE: tl.constexpr, ROPE: tl.constexpr, V: tl.constexpr, HAS_SELECTION: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_V: tl.constexpr,
    DOT_PRECISION: tl.constexpr, UPCAST: tl.constexpr,
):  # fmt: skip
    # One program: BLOCK_M query tokens of one sequence (sorted_tokens, grouped by sequence) x one head.
    tl.static_assert(32 % BLOCK_N == 0, "a key block must not straddle two selection words")
    head = tl.program_id(1)
    seq, tokens, t_ok = block_items(tl.program_id(0), block_seq_ptr, sorted_tokens_ptr, T, BLOCK_M)
    if seq < 0:
        return
    pos = tl.load(query_pos_ptr + tokens, mask=t_ok, other=-1)  # padding rows see nothing
    tok = tokens.to(tl.int64)
    base = tl.load(key_start_ptr + seq).to(tl.int64)
    offs_d = tl.arange(0, BLOCK_D)
    offs_v = tl.arange(0, BLOCK_V)
    is_nope = offs_d < NOPE
    is_rope = (offs_d >= NOPE) & (offs_d < NOPE + ROPE)
    q = tl.load(q_ptr + tok[:, None] * stride_qt + head * stride_qh + offs_d[None, :],
                mask=t_ok[:, None] & (offs_d[None, :] < NOPE + ROPE), other=0.0)  # fmt: skip
    if UPCAST:
        q = q.to(tl.float32)
    kv_head = kv_ptr + head * stride_kvh
    # Finite start so that a block whose keys are all hidden gives exp(-inf - m) = 0, never NaN.
    m_i = tl.full([BLOCK_M], -1.0e30, dtype=tl.float32)
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
    acc = tl.zeros([BLOCK_M, BLOCK_V], dtype=tl.float32)
    hi = tl.max(pos, axis=0) + 1  # causal: no key past the tile's last position is read
    for k0 in range(0, hi, BLOCK_N):
        offs_n = k0 + tl.arange(0, BLOCK_N)
        n_ok = offs_n < hi
        visible = offs_n[None, :] <= pos[:, None]  # [BLOCK_M, BLOCK_N]
        if HAS_SELECTION:  # the block lies in one 32-bit word of each token's selection
            words = tl.load(sel_ptr + tok * stride_sel + k0 // 32, mask=t_ok, other=0)
            visible = visible & (((words[:, None] >> (offs_n[None, :] & 31)) & 1) != 0)
        rows = base + offs_n
        # [nope | rope] of BLOCK_N keys as one [BLOCK_D, BLOCK_N] tile: k_nope from this head's kv
        # row, k_pe from the shared rope row (the two masked loads never overlap).
        k = tl.load(kv_head + rows[None, :] * stride_kvu + offs_d[:, None],
                    mask=n_ok[None, :] & is_nope[:, None], other=0.0)  # fmt: skip
        k += tl.load(pe_ptr + rows[None, :] * stride_pe + (offs_d[:, None] - NOPE),
                     mask=n_ok[None, :] & is_rope[:, None], other=0.0)  # fmt: skip
        v = tl.load(kv_head + rows[:, None] * stride_kvu + NOPE + offs_v[None, :],
                    mask=n_ok[:, None] & (offs_v[None, :] < V), other=0.0)  # fmt: skip
        if UPCAST:
            k = k.to(tl.float32)
            v = v.to(tl.float32)
        scores = tl.dot(q, k, input_precision=DOT_PRECISION)
        scores = tl.where(visible, scores * softmax_scale, float("-inf"))
        m_i, l_i, acc = online_softmax_step(m_i, l_i, acc, scores, v, DOT_PRECISION)
    out = acc / tl.where(l_i > 0.0, l_i, 1.0)[:, None]
    out_ptrs = out_ptr + tok[:, None] * stride_ot + head * stride_oh + offs_v[None, :]
    tl.store(out_ptrs, out.to(out_ptr.dtype.element_ty), mask=t_ok[:, None] & (offs_v[None, :] < V))


_MLA_PREFILL_KERNEL = TritonKernel(_mla_prefill_kernel)


def mla_prefill_meta(nope_dim: int, rope_dim: int, v_dim: int, dtype: torch.dtype, has_selection: bool = False) -> dict:
    """Compile-time constants and launch options (also used by the AOT compile test). At GLM-5
    sizes (192 + 64 = 256 wide q.k, v 256) the fp32 accumulator is BLOCK_M x 256: BLOCK_M=64,
    BLOCK_N=32 and 8 warps compile for sm_90 (16-aligned launch) to 240 registers, 254 with a
    selection, no spills; BLOCK_N=64 or 4 warps spill. Untuned for speed: no GPU yet."""
    return dict(
        NOPE=nope_dim, ROPE=rope_dim, V=v_dim, HAS_SELECTION=has_selection, BLOCK_M=64, BLOCK_N=32,
        BLOCK_D=max(16, next_pow2(nope_dim + rope_dim)), BLOCK_V=max(16, next_pow2(v_dim)),
        DOT_PRECISION=dot_precision(dtype), num_warps=8, num_stages=2,
    )  # fmt: skip


def mla_prefill_triton(q, kv, k_pe, key_start, query_seq, query_pos, softmax_scale, nope_dim, selection=None):
    """Triton: same contract as ``mla_prefill_torch``."""
    T, H, _ = q.shape
    out = _zeros_out(q, kv, nope_dim)
    if T == 0:
        return out
    meta = mla_prefill_meta(nope_dim, q.shape[-1] - nope_dim, out.shape[-1], q.dtype, selection is not None)
    blocks = group_into_blocks(query_seq, key_start.shape[0], meta["BLOCK_M"])
    q = q if q.stride(-1) == 1 else q.contiguous()
    sel = selection.contiguous() if selection is not None else query_pos  # never read without a selection
    _MLA_PREFILL_KERNEL.launch(
        (blocks.block_group.shape[0], H),
        q, kv, k_pe, key_start.contiguous(), blocks.sorted_items, blocks.block_group, query_pos.contiguous(), sel, out,
        T, float(softmax_scale),
        q.stride(0), q.stride(1), kv.stride(0), kv.stride(1), k_pe.stride(0), sel.stride(0), out.stride(0), out.stride(1),
        device=q.device, **meta,
    )  # fmt: skip
    return out


def mla_prefill_attention(
    q: torch.Tensor,
    kv: torch.Tensor,
    k_pe: torch.Tensor,
    key_start: torch.Tensor,
    query_seq: torch.Tensor,
    query_pos: torch.Tensor,
    softmax_scale: float,
    nope_dim: int,
    selection: torch.Tensor | None = None,
    *,
    backend: str = "auto",
) -> torch.Tensor:
    """Expanded-form MLA attention (see the module docstring): out [T, H, v] in q's dtype.

    q [T, H, nope + rope]; kv [U, H, nope + v] and k_pe [U, rope] of q's dtype (rows with unit
    stride in their last dim); key_start [B] the row of position 0 of each sequence; query_seq,
    query_pos [T]; selection [T, ceil(S / 32)] int32 words (``selection_bits``) or None = every key
    up to the token's position.
    """
    dims = check_tensor("q", q, ["T", "H", "D"], FLOAT_DTYPES)
    if not 0 < nope_dim < dims["D"]:
        raise ValueError(f"nope_dim={nope_dim}: expected 0 < nope_dim < q.shape[-1] ({dims['D']})")
    check_tensor("kv", kv, ["U", "H", None], (q.dtype,), dims)
    if kv.shape[-1] <= nope_dim:
        raise ValueError(f"kv: last dim {kv.shape[-1]}, expected nope_dim ({nope_dim}) + v_head_dim")
    check_tensor("k_pe", k_pe, ["U", dims["D"] - nope_dim], (q.dtype,), dims)
    check_tensor("key_start", key_start, ["B"], INDEX_DTYPES, dims)
    check_tensor("query_seq", query_seq, ["T"], INDEX_DTYPES, dims)
    check_tensor("query_pos", query_pos, ["T"], INDEX_DTYPES, dims)
    if selection is not None:
        check_tensor("selection", selection, ["T", None], (torch.int32,), dims)
    if kv.stride(-1) != 1 or k_pe.stride(-1) != 1:
        raise ValueError("kv, k_pe: their last dim must have unit stride (rows of a contiguous buffer)")
    device = check_same_device(q=q, kv=kv, k_pe=k_pe, key_start=key_start, query_seq=query_seq, query_pos=query_pos)
    impl = mla_prefill_triton if resolve_backend(backend, device) == "triton" else mla_prefill_torch
    return impl(q, kv, k_pe, key_start, query_seq, query_pos, softmax_scale, nope_dim, selection)
