"""Routed-expert SwiGLU MLP over FP8 block-quantized expert weights (W8A8), as vLLM's fused MoE
with ``use_fp8_w8a8=True, block_shape=[128, 128]``.

Weight layout: kernels/fused_moe.py's packed experts, stored e4m3 with per-expert block scales:
    gate_up [E, 2I, H] e4m3, gate_up_scale [E, 2I/bn, ceil(H/bk)] fp32  (I a multiple of bn, so no
                                                                         scale block mixes gate and up)
    down    [E, H, I]  e4m3, down_scale    [E, ceil(H/bn), I/bk] fp32
Activations are quantized per token in 1 x bk groups twice: the hidden state once before gate_up
(kernels/fp8_gemm.act_quant; every expert of a token reads the same codes), and the SwiGLU output
once per (token, expert) pair before down. Kernel 1 quantizes that output itself: its program
computes exactly one bk-wide group of intermediate columns (BLOCK_N = bk), so each row's group
amax is local to the program (vLLM's silu_mul_per_token_group_quant does the same as a separate
pass). Expert ids outside [0, E) contribute nothing (expert parallelism: another rank owns them).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from kernels.backend import TritonKernel, cdiv, resolve_backend, tl
from kernels.fp8_gemm import (
    AMAX_FLOOR,
    E4M3,
    E4M3_MAX,
    act_dequant_torch,
    act_quant,
    act_quant_torch,
    check_group,
    quant_tile,
    weight_dequant_torch,
)
from kernels.grouped_blocks import block_items, routed_pairs, sort_by_group
from kernels.validate import FLOAT_DTYPES, INDEX_DTYPES, check_same_device, check_tensor


def fused_moe_fp8_torch(hidden, gate_up, gate_up_scale, down, down_scale, topk_ids, topk_weights, block=(128, 128)):
    """Reference: the same quantized operands, fp32 products and sums, one matmul per active expert."""
    T, H = hidden.shape
    E, two_i, _ = gate_up.shape
    top_k = topk_ids.shape[1]
    xq, xs = act_quant_torch(hidden, block[1])
    x = act_dequant_torch(xq, xs, block[1])
    groups = sort_by_group(topk_ids, E)
    pairs = groups.sorted_items
    out = torch.zeros((T * top_k, H), dtype=torch.float32, device=hidden.device)
    route_w = topk_weights.reshape(-1).float()
    start = 0
    for e, count in enumerate(groups.counts.tolist()):
        if not count:
            continue
        p = pairs[start : start + count]
        start += count
        gu = x[p // top_k] @ weight_dequant_torch(gate_up[e], gate_up_scale[e], block, torch.float32).T
        gate, up = gu.split(two_i // 2, dim=-1)
        aq, a_s = act_quant_torch(F.silu(gate) * up, block[1])
        y = act_dequant_torch(aq, a_s, block[1]) @ weight_dequant_torch(down[e], down_scale[e], block, torch.float32).T
        out[p] = y * route_w[p, None]
    return out.view(T, top_k, H).sum(dim=1).to(hidden.dtype)


def _moe_fp8_gate_up_kernel(
    x_ptr, xs_ptr, w_ptr, ws_ptr, act_ptr, act_s_ptr, sorted_pairs_ptr, block_expert_ptr,
    num_pairs, top_k, H, I, amax_floor,
    stride_xt, stride_xst, stride_we, stride_wn, stride_wse, stride_wsn, stride_ap, stride_asp,
    GROUP_N: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_K: tl.constexpr, E4M3_MAX_C: tl.constexpr,
    UPCAST: tl.constexpr,
):  # fmt: skip
    # One program: BLOCK_M pairs of one expert x one quantization group (BLOCK_K columns) of I.
    pid_n = tl.program_id(1)
    expert, pairs, row_ok = block_items(tl.program_id(0), block_expert_ptr, sorted_pairs_ptr, num_pairs, BLOCK_M)
    if expert < 0:
        return
    tokens = (pairs // top_k).to(tl.int64)
    offs_n = pid_n * BLOCK_K + tl.arange(0, BLOCK_K)  # I is a multiple of BLOCK_K: no mask
    offs_k = tl.arange(0, BLOCK_K)
    w_base = w_ptr + expert * stride_we
    ws_base = ws_ptr + expert * stride_wse
    gate_s_ptrs = ws_base + (offs_n // GROUP_N) * stride_wsn
    up_s_ptrs = ws_base + ((offs_n + I) // GROUP_N) * stride_wsn
    acc_gate = tl.zeros([BLOCK_M, BLOCK_K], dtype=tl.float32)
    acc_up = tl.zeros([BLOCK_M, BLOCK_K], dtype=tl.float32)
    for kb in range(0, H // BLOCK_K):
        k = kb * BLOCK_K + offs_k
        x = tl.load(x_ptr + tokens[:, None] * stride_xt + k[None, :], mask=row_ok[:, None], other=0.0)
        x_s = tl.load(xs_ptr + tokens * stride_xst + kb, mask=row_ok, other=0.0)
        w_gate = tl.load(w_base + offs_n[None, :] * stride_wn + k[:, None])
        w_up = tl.load(w_base + (offs_n[None, :] + I) * stride_wn + k[:, None])
        s_gate = tl.load(gate_s_ptrs + kb)
        s_up = tl.load(up_s_ptrs + kb)
        if UPCAST:
            x = x.to(tl.float32)
            w_gate = w_gate.to(tl.float32)
            w_up = w_up.to(tl.float32)
        acc_gate += tl.dot(x, w_gate) * x_s[:, None] * s_gate[None, :]
        acc_up += tl.dot(x, w_up) * x_s[:, None] * s_up[None, :]
    act = acc_gate * tl.sigmoid(acc_gate) * acc_up
    q, s = quant_tile(act, amax_floor, E4M3_MAX_C)
    rows = pairs.to(tl.int64)
    q_ptrs = act_ptr + rows[:, None] * stride_ap + offs_n[None, :]
    tl.store(q_ptrs, q.to(act_ptr.dtype.element_ty, fp_downcast_rounding="rtne"), mask=row_ok[:, None])
    tl.store(act_s_ptr + rows * stride_asp + pid_n, s, mask=row_ok)


def _moe_fp8_down_kernel(
    act_ptr, act_s_ptr, w_ptr, ws_ptr, out_ptr, weights_ptr, sorted_pairs_ptr, block_expert_ptr,
    num_pairs, H, I,
    stride_ap, stride_asp, stride_we, stride_wn, stride_wse, stride_wsn, stride_op,
    GROUP_N: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
    UPCAST: tl.constexpr,
):  # fmt: skip
    # One program: BLOCK_M pairs of one expert x BLOCK_N hidden columns; scales by the routing weight.
    pid_n = tl.program_id(1)
    expert, pairs, row_ok = block_items(tl.program_id(0), block_expert_ptr, sorted_pairs_ptr, num_pairs, BLOCK_M)
    if expert < 0:
        return
    rows = pairs.to(tl.int64)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    n_ok = offs_n < H
    offs_k = tl.arange(0, BLOCK_K)
    w_base = w_ptr + expert * stride_we
    ws_ptrs = ws_ptr + expert * stride_wse + (offs_n // GROUP_N) * stride_wsn
    acc = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
    for kb in range(0, I // BLOCK_K):
        k = kb * BLOCK_K + offs_k
        a = tl.load(act_ptr + rows[:, None] * stride_ap + k[None, :], mask=row_ok[:, None], other=0.0)
        a_s = tl.load(act_s_ptr + rows * stride_asp + kb, mask=row_ok, other=0.0)
        w = tl.load(w_base + offs_n[None, :] * stride_wn + k[:, None], mask=n_ok[None, :], other=0.0)
        w_s = tl.load(ws_ptrs + kb, mask=n_ok, other=0.0)
        if UPCAST:
            a = a.to(tl.float32)
            w = w.to(tl.float32)
        acc += tl.dot(a, w) * a_s[:, None] * w_s[None, :]
    route_w = tl.load(weights_ptr + rows, mask=row_ok, other=0.0).to(tl.float32)
    acc = acc * route_w[:, None]
    tl.store(out_ptr + rows[:, None] * stride_op + offs_n[None, :], acc, mask=row_ok[:, None] & n_ok[None, :])


_GATE_UP_KERNEL = TritonKernel(_moe_fp8_gate_up_kernel)
_DOWN_KERNEL = TritonKernel(_moe_fp8_down_kernel)


def fused_moe_fp8_meta(block: tuple[int, int] = (128, 128), block_m: int = 16, block_n: int = 128) -> tuple[dict, dict]:
    """(gate_up meta, down meta); BLOCK_M=16 suits decode and EP-local batches (few pairs per
    expert). Untuned: fixed configs until a GPU run measures better ones."""
    gate_up = dict(GROUP_N=block[0], BLOCK_M=block_m, BLOCK_K=block[1], E4M3_MAX_C=E4M3_MAX, num_warps=4, num_stages=3)
    down = dict(GROUP_N=block[0], BLOCK_M=block_m, BLOCK_N=block_n, BLOCK_K=block[1], num_warps=4, num_stages=3)
    return gate_up, down


def fused_moe_fp8_triton(
    hidden, gate_up, gate_up_scale, down, down_scale, topk_ids, topk_weights, block=(128, 128), block_m=16
):
    H = hidden.shape[1]
    E, two_i, _ = gate_up.shape
    I = two_i // 2
    if block[1] < 16 or block[1] & (block[1] - 1):
        raise ValueError(f"fused_moe_fp8 Triton: K block {block[1]} must be a power of two >= 16 (tl.dot tile)")
    pairs = routed_pairs(topk_ids, topk_weights, E, H, block_m)
    if pairs.num_pairs == 0:
        return torch.zeros_like(hidden)
    xq, xs = act_quant(hidden, block[1], backend="triton")
    gate_up, gate_up_scale, down, down_scale = (t.contiguous() for t in (gate_up, gate_up_scale, down, down_scale))
    meta_gu, meta_down = fused_moe_fp8_meta(block, block_m, min(128, max(16, block[0])))
    blocks, out = pairs.blocks, pairs.out
    act = torch.empty((pairs.num_pairs, I), dtype=E4M3, device=hidden.device)
    act_s = torch.empty((pairs.num_pairs, I // block[1]), dtype=torch.float32, device=hidden.device)
    _GATE_UP_KERNEL.launch(
        (pairs.num_blocks, I // block[1]),
        xq, xs, gate_up, gate_up_scale, act, act_s, blocks.sorted_items, blocks.block_group,
        pairs.num_pairs, pairs.top_k, H, I, AMAX_FLOOR,
        xq.stride(0), xs.stride(0), gate_up.stride(0), gate_up.stride(1), gate_up_scale.stride(0),
        gate_up_scale.stride(1), act.stride(0), act_s.stride(0),
        device=hidden.device, **meta_gu,
    )  # fmt: skip
    _DOWN_KERNEL.launch(
        (pairs.num_blocks, cdiv(H, meta_down["BLOCK_N"])),
        act, act_s, down, down_scale, out, pairs.weights, blocks.sorted_items, blocks.block_group,
        pairs.num_pairs, H, I,
        act.stride(0), act_s.stride(0), down.stride(0), down.stride(1), down_scale.stride(0), down_scale.stride(1),
        out.stride(0),
        device=hidden.device, **meta_down,
    )  # fmt: skip
    return pairs.combine(hidden.dtype)


def fused_moe_fp8(
    hidden, gate_up, gate_up_scale, down, down_scale, topk_ids, topk_weights, block=(128, 128), *, backend="auto"
) -> torch.Tensor:
    """Routed experts' weighted SwiGLU output [T, H] over FP8 experts (see the module docstring)."""
    dims = check_tensor("hidden", hidden, ["T", "H"], FLOAT_DTYPES)
    check_tensor("gate_up", gate_up, ["E", "2I", "H"], (E4M3,), dims)
    inter = dims["2I"] // 2
    if dims["2I"] % 2 or inter % block[0]:
        raise ValueError(f"gate_up: dim 1 is {dims['2I']}, expected 2 * I with I a multiple of the {block[0]}-row block")
    check_group("fused_moe_fp8 (hidden)", dims["H"], block[1])
    check_group("fused_moe_fp8 (intermediate)", inter, block[1])
    check_tensor("gate_up_scale", gate_up_scale, ["E", dims["2I"] // block[0], dims["H"] // block[1]], (torch.float32,), dims)
    check_tensor("down", down, ["E", "H", inter], (E4M3,), dims)
    check_tensor("down_scale", down_scale, ["E", cdiv(dims["H"], block[0]), inter // block[1]], (torch.float32,), dims)
    check_tensor("topk_ids", topk_ids, ["T", "K"], INDEX_DTYPES, dims)
    check_tensor("topk_weights", topk_weights, ["T", "K"], FLOAT_DTYPES, dims)
    device = check_same_device(hidden=hidden, gate_up=gate_up, down=down, topk_ids=topk_ids)
    impl = fused_moe_fp8_triton if resolve_backend(backend, device) == "triton" else fused_moe_fp8_torch
    return impl(hidden, gate_up, gate_up_scale, down, down_scale, topk_ids, topk_weights, block)
