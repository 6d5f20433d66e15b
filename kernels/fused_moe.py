"""Routed-expert SwiGLU MLP over packed expert weights (the MoE block of GLM-5, minus router/shared).

Weight layout (the same as transformers' ``GlmMoeDsaExperts`` after loading):
    gate_up [E, 2*I, H]: rows 0..I-1 are gate_proj, rows I..2I-1 are up_proj of each expert
    down    [E, H, I]
For token t and its routed experts topk_ids[t, j] with weights topk_weights[t, j]:

    out[t] = sum_j  topk_weights[t, j] * down[e] @ (silu(gate[e] @ x[t]) * (up[e] @ x[t])),  e = topk_ids[t, j]

Expert ids outside [0, E) contribute nothing (expert parallelism: another rank owns them).
The routing weights already include norm_topk_prob and routed_scaling_factor (the router's job).

Triton path: pairs are sorted by expert into blocks of BLOCK_M (``grouped_blocks.routed_pairs``);
kernel 1 computes gate and up for a block in one pass over x and applies SwiGLU; kernel 2 multiplies
by down and the routing weight. The k partial outputs of a token are summed with a reshape-sum (no
atomics, so the result is deterministic).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from kernels.backend import TritonKernel, cdiv, dot_precision, resolve_backend, tl
from kernels.grouped_blocks import block_items, routed_pairs, sort_by_group
from kernels.validate import FLOAT_DTYPES, INDEX_DTYPES, check_same_device, check_tensor


def _grouped_linear(x: torch.Tensor, w: torch.Tensor, counts: torch.Tensor, group_ends: torch.Tensor) -> torch.Tensor:
    """y[rows of group e] = x[rows of group e] @ w[e].T for x sorted by group; w [E, N, K]."""
    aligned = all(n * x.element_size() % 16 == 0 for n in (x.shape[1], w.shape[1]))
    # grouped_mm takes fp32 and bf16 on CPU but only bf16 on CUDA.
    dtype_ok = x.dtype == torch.bfloat16 or (x.dtype == torch.float32 and x.device.type == "cpu")
    if hasattr(F, "grouped_mm") and aligned and dtype_ok and x.shape[0] > 0:
        return F.grouped_mm(x.contiguous(), w.transpose(1, 2), offs=group_ends)
    # Odd shapes or an older torch: one matmul per expert that received tokens.
    outs = [xe @ w[e].T for e, xe in enumerate(torch.split(x, counts.tolist())) if xe.shape[0] > 0]
    return torch.cat(outs) if outs else x.new_zeros((0, w.shape[1]))


def fused_moe_torch(
    hidden: torch.Tensor,
    gate_up: torch.Tensor,
    down: torch.Tensor,
    topk_ids: torch.Tensor,
    topk_weights: torch.Tensor,
) -> torch.Tensor:
    """Reference: [T, H] in hidden's dtype. Pairs are sorted by expert and run as one grouped GEMM."""
    T, H = hidden.shape
    E, two_i, _ = gate_up.shape
    top_k = topk_ids.shape[1]
    groups = sort_by_group(topk_ids, E)
    pairs = groups.sorted_items
    x = hidden[pairs // top_k]
    gu = _grouped_linear(x, gate_up, groups.counts, groups.group_ends)
    gate, up = gu.split(two_i // 2, dim=-1)
    act = F.silu(gate) * up
    y = _grouped_linear(act, down, groups.counts, groups.group_ends).float()
    y = y * topk_weights.reshape(-1)[pairs].float()[:, None]
    out = torch.zeros((T * top_k, H), dtype=torch.float32, device=hidden.device)
    out[pairs] = y
    return out.view(T, top_k, H).sum(dim=1).to(hidden.dtype)


def _moe_gate_up_kernel(
    x_ptr, w_ptr, act_ptr, sorted_pairs_ptr, block_expert_ptr,
    num_pairs, top_k, H, I,
    stride_xt, stride_we, stride_wn, stride_ap,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
    DOT_PRECISION: tl.constexpr, UPCAST: tl.constexpr,
):  # fmt: skip
    # One program: BLOCK_M pairs of one expert x BLOCK_N intermediate columns of both gate and up.
    pid_n = tl.program_id(1)
    expert, pairs, row_ok = block_items(tl.program_id(0), block_expert_ptr, sorted_pairs_ptr, num_pairs, BLOCK_M)
    if expert < 0:
        return
    tokens = (pairs // top_k).to(tl.int64)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    n_ok = offs_n < I
    w_base = w_ptr + expert * stride_we
    acc_gate = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
    acc_up = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
    for k0 in range(0, H, BLOCK_K):
        offs_k = k0 + tl.arange(0, BLOCK_K)
        k_ok = offs_k < H
        x = tl.load(x_ptr + tokens[:, None] * stride_xt + offs_k[None, :], mask=row_ok[:, None] & k_ok[None, :], other=0.0)
        w_mask = k_ok[:, None] & n_ok[None, :]
        w_gate = tl.load(w_base + offs_n[None, :] * stride_wn + offs_k[:, None], mask=w_mask, other=0.0)
        w_up = tl.load(w_base + (offs_n[None, :] + I) * stride_wn + offs_k[:, None], mask=w_mask, other=0.0)
        if UPCAST:
            x = x.to(tl.float32)
            w_gate = w_gate.to(tl.float32)
            w_up = w_up.to(tl.float32)
        acc_gate = tl.dot(x, w_gate, acc_gate, input_precision=DOT_PRECISION)
        acc_up = tl.dot(x, w_up, acc_up, input_precision=DOT_PRECISION)
    act = acc_gate * tl.sigmoid(acc_gate) * acc_up
    act_ptrs = act_ptr + pairs[:, None].to(tl.int64) * stride_ap + offs_n[None, :]
    tl.store(act_ptrs, act.to(act_ptr.dtype.element_ty), mask=row_ok[:, None] & n_ok[None, :])


def _moe_down_kernel(
    act_ptr, w_ptr, out_ptr, weights_ptr, sorted_pairs_ptr, block_expert_ptr,
    num_pairs, H, I,
    stride_ap, stride_we, stride_wn, stride_op,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
    DOT_PRECISION: tl.constexpr, UPCAST: tl.constexpr,
):  # fmt: skip
    # One program: BLOCK_M pairs of one expert x BLOCK_N hidden columns; scales by the routing weight.
    pid_n = tl.program_id(1)
    expert, pairs, row_ok = block_items(tl.program_id(0), block_expert_ptr, sorted_pairs_ptr, num_pairs, BLOCK_M)
    if expert < 0:
        return
    pair_rows = pairs.to(tl.int64)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    n_ok = offs_n < H
    w_base = w_ptr + expert * stride_we
    acc = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
    for k0 in range(0, I, BLOCK_K):
        offs_k = k0 + tl.arange(0, BLOCK_K)
        k_ok = offs_k < I
        a = tl.load(act_ptr + pair_rows[:, None] * stride_ap + offs_k[None, :], mask=row_ok[:, None] & k_ok[None, :], other=0.0)
        w = tl.load(w_base + offs_n[None, :] * stride_wn + offs_k[:, None], mask=k_ok[:, None] & n_ok[None, :], other=0.0)
        if UPCAST:
            a = a.to(tl.float32)
            w = w.to(tl.float32)
        acc = tl.dot(a, w, acc, input_precision=DOT_PRECISION)
    route_w = tl.load(weights_ptr + pair_rows, mask=row_ok, other=0.0).to(tl.float32)
    acc = acc * route_w[:, None]
    out_ptrs = out_ptr + pair_rows[:, None] * stride_op + offs_n[None, :]
    tl.store(out_ptrs, acc, mask=row_ok[:, None] & n_ok[None, :])


_GATE_UP_KERNEL = TritonKernel(_moe_gate_up_kernel)
_DOWN_KERNEL = TritonKernel(_moe_down_kernel)


def fused_moe_meta(dtype: torch.dtype, block_m: int = 16, block_n: int = 64, block_k: int = 64) -> dict:
    """Compile-time constants and launch options of both expert kernels (also used by the AOT
    compile test). BLOCK_M=16 suits decode (few pairs per expert); untuned: no GPU yet."""
    return dict(BLOCK_M=block_m, BLOCK_N=block_n, BLOCK_K=block_k, DOT_PRECISION=dot_precision(dtype), num_warps=4)


def fused_moe_triton(
    hidden: torch.Tensor,
    gate_up: torch.Tensor,
    down: torch.Tensor,
    topk_ids: torch.Tensor,
    topk_weights: torch.Tensor,
    block_m: int = 16,
    block_n: int = 64,
    block_k: int = 64,
) -> torch.Tensor:
    """Triton: [T, H] in hidden's dtype; same contract as ``fused_moe_torch``."""
    H = hidden.shape[1]
    E, two_i, _ = gate_up.shape
    I = two_i // 2
    pairs = routed_pairs(topk_ids, topk_weights, E, H, block_m)
    if pairs.num_pairs == 0:
        return torch.zeros_like(hidden)
    hidden, gate_up, down = hidden.contiguous(), gate_up.contiguous(), down.contiguous()
    meta = fused_moe_meta(hidden.dtype, block_m, block_n, block_k)
    blocks, out = pairs.blocks, pairs.out
    act = torch.empty((pairs.num_pairs, I), dtype=hidden.dtype, device=hidden.device)
    _GATE_UP_KERNEL.launch(
        (pairs.num_blocks, cdiv(I, block_n)),
        hidden, gate_up, act, blocks.sorted_items, blocks.block_group,
        pairs.num_pairs, pairs.top_k, H, I,
        hidden.stride(0), gate_up.stride(0), gate_up.stride(1), act.stride(0),
        device=hidden.device, **meta,
    )  # fmt: skip
    _DOWN_KERNEL.launch(
        (pairs.num_blocks, cdiv(H, block_n)),
        act, down, out, pairs.weights, blocks.sorted_items, blocks.block_group,
        pairs.num_pairs, H, I,
        act.stride(0), down.stride(0), down.stride(1), out.stride(0),
        device=hidden.device, **meta,
    )  # fmt: skip
    return pairs.combine(hidden.dtype)


def fused_moe(
    hidden: torch.Tensor,
    gate_up: torch.Tensor,
    down: torch.Tensor,
    topk_ids: torch.Tensor,
    topk_weights: torch.Tensor,
    *,
    backend: str = "auto",
) -> torch.Tensor:
    """Routed experts' weighted SwiGLU output [T, H] (see the module docstring for layouts)."""
    dims = check_tensor("hidden", hidden, ["T", "H"], FLOAT_DTYPES)
    check_tensor("gate_up", gate_up, ["E", "2I", "H"], (hidden.dtype,), dims)
    if dims["2I"] % 2:
        raise ValueError(f"gate_up: dim 1 is {dims['2I']}, expected 2 * moe_intermediate_size (even)")
    check_tensor("down", down, ["E", "H", dims["2I"] // 2], (hidden.dtype,), dims)
    check_tensor("topk_ids", topk_ids, ["T", "K"], INDEX_DTYPES, dims)
    check_tensor("topk_weights", topk_weights, ["T", "K"], FLOAT_DTYPES, dims)
    device = check_same_device(hidden=hidden, gate_up=gate_up, down=down, topk_ids=topk_ids, topk_weights=topk_weights)
    impl = fused_moe_triton if resolve_backend(backend, device) == "triton" else fused_moe_torch
    return impl(hidden, gate_up, down, topk_ids, topk_weights)
