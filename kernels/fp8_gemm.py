"""FP8 block-scaled GEMM (W8A8), per-token activation quantization and weight dequantization.

Formats (the DeepSeek-V3 / GLM-5 FP8 checkpoints, scaleout.md §2):
    weight  wq [N, K] float8_e4m3fn with ws [ceil(N/bn), ceil(K/bk)] fp32:  W = wq * ws[n//bn, k//bk]
    act     xq [M, K] float8_e4m3fn with xs [M, K/bk] fp32 (1 x bk groups):  X = xq * xs[m, k//bk]
    out     = X @ W.T, fp32 accumulation, returned in the requested dtype.

act_quant follows DeepSeek-V3's ``act_quant``: per group amax clamped to >= 1e-4, s = amax / 448,
q = e4m3(x / s). The Triton GEMM's inner step is DeepSeek's ``fp8_gemm_kernel`` / vLLM's
``w8a8_triton_block_scaled_mm``: acc += dot(a, b) * a_s[:, None] * b_s[None, :], one K tile per
quantization group (BLOCK_K = bk), so every K step needs exactly one scale per row and column.
Fixed launch configurations, no autotuning (tuning needs a GPU; see benchmarks/fp8_gemm.py).

Rounding to e4m3 inside the kernels is done in fp32 arithmetic (``_round_e4m3``) and the cast then
only re-encodes an exactly representable value: Triton's interpreter rounds fp32 -> fp8 wrongly at
ties and mantissa carries (triton 3.9, measured here), and this way the code that the CPU tests
interpret is the code that runs on the GPU. It is exact round-to-nearest-even, the same as torch's
cast, so act_quant's Triton and torch outputs agree bit for bit.
"""

from __future__ import annotations

import torch

from kernels.backend import TritonKernel, cdiv, resolve_backend, tl, triton_helper
from kernels.validate import FLOAT_DTYPES, check_same_device, check_tensor

E4M3 = torch.float8_e4m3fn
E4M3_MAX = 448.0
# DeepSeek-V3 inference/kernel.py clamps a group's amax here (vLLM uses eps=1e-10).
AMAX_FLOOR = 1e-4


def check_group(name: str, k: int, group: int) -> None:
    if k % group:
        raise ValueError(
            f"{name}: K={k} is not a multiple of the FP8 quantization block {group} "
            f"(activations are quantized in 1x{group} groups along K)"
        )


# ---- torch references ---------------------------------------------------------------------------


def act_quant_torch(x: torch.Tensor, group: int = 128) -> tuple[torch.Tensor, torch.Tensor]:
    """x [..., K] -> (e4m3 [..., K], fp32 scales [..., K/group])."""
    check_group("act_quant", x.shape[-1], group)
    g = x.float().unflatten(-1, (-1, group))
    scale = g.abs().amax(-1).clamp_min(AMAX_FLOOR) / E4M3_MAX
    q = (g / scale.unsqueeze(-1)).clamp(-E4M3_MAX, E4M3_MAX).to(E4M3)
    return q.flatten(-2), scale


def _expand_scale(scale: torch.Tensor, rows: int, cols: int, block: tuple[int, int]) -> torch.Tensor:
    return scale.repeat_interleave(block[0], -2)[..., :rows, :].repeat_interleave(block[1], -1)[..., :cols]


def weight_dequant_torch(wq: torch.Tensor, ws: torch.Tensor, block: tuple[int, int] = (128, 128), dtype=torch.bfloat16):
    """wq [..., N, K] e4m3, ws [..., ceil(N/bn), ceil(K/bk)] -> W in dtype (fp32 product, then cast)."""
    n, k = wq.shape[-2:]
    return (wq.float() * _expand_scale(ws.float(), n, k, block)).to(dtype)


def act_dequant_torch(xq: torch.Tensor, xs: torch.Tensor, group: int) -> torch.Tensor:
    return (xq.float().unflatten(-1, (-1, group)) * xs.unsqueeze(-1)).flatten(-2)


def fp8_gemm_torch(xq, xs, wq, ws, block: tuple[int, int] = (128, 128), out_dtype=torch.bfloat16) -> torch.Tensor:
    """Exact reference: both operands dequantized to fp32 (every product of an e4m3 value and an
    fp32 scale is exact up to fp32 rounding), one fp32 matmul."""
    return (act_dequant_torch(xq, xs, block[1]) @ weight_dequant_torch(wq, ws, block, torch.float32).T).to(out_dtype)


# ---- Triton kernels -----------------------------------------------------------------------------


@triton_helper
def _round_e4m3(y):
    """fp32 -> the nearest e4m3 value (ties to even), still fp32; |y| <= 448 already."""
    bits = y.to(tl.int32, bitcast=True)
    a = tl.abs(y)
    e = ((a.to(tl.int32, bitcast=True) >> 23) & 0xFF) - 127
    e = tl.maximum(e, -6)  # e4m3 subnormals share the spacing of the smallest normal binade
    q = ((e - 3 + 127) << 23).to(tl.float32, bitcast=True)  # spacing of the 3-bit mantissa grid
    inv_q = ((127 - (e - 3)) << 23).to(tl.float32, bitcast=True)
    r = a * inv_q  # exact: a power-of-two scaling
    f = tl.floor(r)
    d = r - f
    odd = (f - 2.0 * tl.floor(f * 0.5)) == 1.0
    up = (d > 0.5) | ((d == 0.5) & odd)
    mag = (f + up.to(tl.float32)) * q
    return tl.where(bits < 0, -mag, mag)  # bits < 0: the sign bit, so -0.0 stays -0.0


@triton_helper
def quant_tile(x, amax_floor, E4M3_MAX_C: tl.constexpr):
    """x [R, G] fp32 -> (q [R, G] fp32 on the e4m3 grid, scale [R]) per row of the tile."""
    amax = tl.maximum(tl.max(tl.abs(x), axis=1), amax_floor)
    s = amax / E4M3_MAX_C
    y = tl.math.div_rn(x, s[:, None])  # IEEE division, as torch's x / s
    y = tl.minimum(tl.maximum(y, -E4M3_MAX_C), E4M3_MAX_C)
    return _round_e4m3(y), s


def _act_quant_kernel(
    x_ptr, q_ptr, s_ptr, M, K, stride_xm, stride_qm, stride_sm, amax_floor,
    GROUP: tl.constexpr, BLOCK_M: tl.constexpr, E4M3_MAX_C: tl.constexpr, UPCAST: tl.constexpr,
):  # fmt: skip
    # One program: BLOCK_M rows x one quantization group.
    pid_m = tl.program_id(0)
    g = tl.program_id(1)
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_k = g * GROUP + tl.arange(0, GROUP)
    m_ok = offs_m < M
    rows = offs_m.to(tl.int64)
    x = tl.load(x_ptr + rows[:, None] * stride_xm + offs_k[None, :], mask=m_ok[:, None], other=0.0).to(tl.float32)
    q, s = quant_tile(x, amax_floor, E4M3_MAX_C)
    # the value is already on the e4m3 grid; rtne only keeps the interpreter from truncating it
    q = q.to(q_ptr.dtype.element_ty, fp_downcast_rounding="rtne")
    tl.store(q_ptr + rows[:, None] * stride_qm + offs_k[None, :], q, mask=m_ok[:, None])
    tl.store(s_ptr + rows * stride_sm + g, s, mask=m_ok)


def _fp8_gemm_kernel(
    a_ptr, as_ptr, b_ptr, bs_ptr, c_ptr, M, N, K,
    stride_am, stride_asm, stride_bn, stride_bsn, stride_cm,
    GROUP_N: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
    UPCAST: tl.constexpr,
):  # fmt: skip
    # One program: BLOCK_M rows x BLOCK_N output columns; K in steps of one quantization group.
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    m_ok = offs_m < M
    n_ok = offs_n < N
    rows = offs_m.to(tl.int64)
    cols = offs_n.to(tl.int64)
    a_ptrs = a_ptr + rows[:, None] * stride_am + offs_k[None, :]
    b_ptrs = b_ptr + cols[None, :] * stride_bn + offs_k[:, None]  # [BLOCK_K, BLOCK_N] view of b [N, K]
    as_ptrs = as_ptr + rows * stride_asm
    bs_ptrs = bs_ptr + (offs_n // GROUP_N).to(tl.int64) * stride_bsn
    acc = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
    for kb in range(0, K // BLOCK_K):
        a = tl.load(a_ptrs, mask=m_ok[:, None], other=0.0)
        b = tl.load(b_ptrs, mask=n_ok[None, :], other=0.0)
        a_s = tl.load(as_ptrs + kb, mask=m_ok, other=0.0)
        b_s = tl.load(bs_ptrs + kb, mask=n_ok, other=0.0)
        if UPCAST:  # the interpreter multiplies fp8 dot operands as raw bytes
            a = a.to(tl.float32)
            b = b.to(tl.float32)
        acc += tl.dot(a, b) * a_s[:, None] * b_s[None, :]
        a_ptrs += BLOCK_K
        b_ptrs += BLOCK_K
    c_ptrs = c_ptr + rows[:, None] * stride_cm + offs_n[None, :]
    tl.store(c_ptrs, acc.to(c_ptr.dtype.element_ty), mask=m_ok[:, None] & n_ok[None, :])


def _weight_dequant_kernel(
    w_ptr, s_ptr, y_ptr, N, K, stride_wn, stride_sn, stride_yn,
    BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, UPCAST: tl.constexpr,
):  # fmt: skip
    # One program: one bn x bk scale block (DeepSeek's weight_dequant).
    pid_n = tl.program_id(0)
    pid_k = tl.program_id(1)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_k = pid_k * BLOCK_K + tl.arange(0, BLOCK_K)
    mask = (offs_n < N)[:, None] & (offs_k < K)[None, :]
    rows = offs_n.to(tl.int64)
    w = tl.load(w_ptr + rows[:, None] * stride_wn + offs_k[None, :], mask=mask, other=0.0).to(tl.float32)
    s = tl.load(s_ptr + pid_n * stride_sn + pid_k)
    y = (w * s).to(y_ptr.dtype.element_ty, fp_downcast_rounding="rtne")
    tl.store(y_ptr + rows[:, None] * stride_yn + offs_k[None, :], y, mask=mask)


_ACT_QUANT_KERNEL = TritonKernel(_act_quant_kernel)
_GEMM_KERNEL = TritonKernel(_fp8_gemm_kernel)
_DEQUANT_KERNEL = TritonKernel(_weight_dequant_kernel)


def act_quant_meta(group: int = 128, block_m: int = 16) -> dict:
    return dict(GROUP=group, BLOCK_M=block_m, E4M3_MAX_C=E4M3_MAX, num_warps=4)


def gemm_meta(m: int, block: tuple[int, int] = (128, 128), block_n: int | None = None) -> dict:
    """Fixed configs (vLLM's default is 64x128x128, 4 warps, 2 stages): 16 rows for decode-sized
    M (the weight read dominates), 64 rows otherwise."""
    block_m = 16 if m <= 16 else 64
    block_n = block_n or min(128, max(16, block[0]))
    return dict(GROUP_N=block[0], BLOCK_M=block_m, BLOCK_N=block_n, BLOCK_K=block[1], num_warps=4, num_stages=3)


def _check_triton_block(block: tuple[int, int]) -> None:
    if block[1] < 16 or block[1] & (block[1] - 1):
        raise ValueError(f"fp8 Triton kernels: K block {block[1]} must be a power of two >= 16 (tl.dot tile)")


def act_quant_triton(x: torch.Tensor, group: int = 128, block_m: int = 16) -> tuple[torch.Tensor, torch.Tensor]:
    check_group("act_quant", x.shape[-1], group)
    _check_triton_block((group, group))
    lead, k = x.shape[:-1], x.shape[-1]
    x2 = x.reshape(-1, k)
    if x2.stride(-1) != 1:
        x2 = x2.contiguous()
    m = x2.shape[0]
    q = torch.empty((m, k), dtype=E4M3, device=x.device)
    s = torch.empty((m, k // group), dtype=torch.float32, device=x.device)
    if m:
        _ACT_QUANT_KERNEL.launch(
            (cdiv(m, block_m), k // group), x2, q, s, m, k, x2.stride(0), q.stride(0), s.stride(0), AMAX_FLOOR,
            device=x.device, **act_quant_meta(group, block_m),
        )  # fmt: skip
    return q.view(*lead, k), s.view(*lead, k // group)


def fp8_gemm_triton(xq, xs, wq, ws, block: tuple[int, int] = (128, 128), out_dtype=torch.bfloat16, block_n=None):
    _check_triton_block(block)
    m, k = xq.shape
    n = wq.shape[0]
    xq, xs, wq, ws = (t if t.stride(-1) == 1 else t.contiguous() for t in (xq, xs, wq, ws))
    out = torch.empty((m, n), dtype=out_dtype, device=xq.device)
    if m == 0:
        return out
    meta = gemm_meta(m, block, block_n)
    _GEMM_KERNEL.launch(
        (cdiv(m, meta["BLOCK_M"]), cdiv(n, meta["BLOCK_N"])),
        xq, xs, wq, ws, out, m, n, k, xq.stride(0), xs.stride(0), wq.stride(0), ws.stride(0), out.stride(0),
        device=xq.device, **meta,
    )  # fmt: skip
    return out


def weight_dequant_triton(wq, ws, block: tuple[int, int] = (128, 128), dtype=torch.bfloat16) -> torch.Tensor:
    n, k = wq.shape
    wq = wq.contiguous()
    ws = ws.contiguous()
    y = torch.empty((n, k), dtype=dtype, device=wq.device)
    _DEQUANT_KERNEL.launch(
        (cdiv(n, block[0]), cdiv(k, block[1])), wq, ws, y, n, k, wq.stride(0), ws.stride(0), y.stride(0),
        device=wq.device, BLOCK_N=block[0], BLOCK_K=block[1], num_warps=4,
    )  # fmt: skip
    return y


# ---- dispatchers --------------------------------------------------------------------------------


def _check_weight(wq: torch.Tensor, ws: torch.Tensor, block: tuple[int, int]) -> dict[str, int]:
    dims = check_tensor("wq", wq, ["N", "K"], (E4M3,))
    want = (cdiv(dims["N"], block[0]), cdiv(dims["K"], block[1]))
    check_tensor("ws", ws, list(want), (torch.float32,))
    return dims


def act_quant(x: torch.Tensor, group: int = 128, *, backend: str = "auto") -> tuple[torch.Tensor, torch.Tensor]:
    """x [..., K] float -> (e4m3 [..., K], fp32 [..., K/group]); K must be a multiple of group."""
    if x.dtype not in FLOAT_DTYPES:
        raise ValueError(f"x: dtype {x.dtype}, expected one of {[str(d) for d in FLOAT_DTYPES]}")
    impl = act_quant_triton if resolve_backend(backend, x.device) == "triton" else act_quant_torch
    return impl(x, group)


def fp8_gemm(xq, xs, wq, ws, block: tuple[int, int] = (128, 128), out_dtype=torch.bfloat16, *, backend: str = "auto"):
    """xq [M, K] e4m3, xs [M, K/bk], wq [N, K] e4m3, ws [ceil(N/bn), K/bk] -> [M, N] out_dtype."""
    dims = _check_weight(wq, ws, block)
    check_group("fp8_gemm", dims["K"], block[1])
    check_tensor("xq", xq, ["M", "K"], (E4M3,), dims)
    check_tensor("xs", xs, ["M", dims["K"] // block[1]], (torch.float32,), dims)
    device = check_same_device(xq=xq, xs=xs, wq=wq, ws=ws)
    impl = fp8_gemm_triton if resolve_backend(backend, device) == "triton" else fp8_gemm_torch
    return impl(xq, xs, wq, ws, block, out_dtype)


def w8a8_linear(x: torch.Tensor, wq, ws, block: tuple[int, int] = (128, 128), *, backend: str = "auto") -> torch.Tensor:
    """F.linear(x, W) with W = dequant(wq, ws) computed as act_quant(x) + block-scaled FP8 GEMM."""
    lead, k = x.shape[:-1], x.shape[-1]
    xq, xs = act_quant(x.reshape(-1, k), block[1], backend=backend)
    return fp8_gemm(xq, xs, wq, ws, block, x.dtype, backend=backend).view(*lead, wq.shape[0])


def weight_dequant(wq, ws, block: tuple[int, int] = (128, 128), dtype=torch.bfloat16, *, backend: str = "auto"):
    """wq [N, K] e4m3, ws [ceil(N/bn), ceil(K/bk)] -> [N, K] in dtype (partial last blocks allowed)."""
    _check_weight(wq, ws, block)
    device = check_same_device(wq=wq, ws=ws)
    impl = weight_dequant_triton if resolve_backend(backend, device) == "triton" else weight_dequant_torch
    return impl(wq, ws, block, dtype)
