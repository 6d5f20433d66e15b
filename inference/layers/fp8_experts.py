"""Routed experts whose packed weights stay FP8 e4m3 with per-expert block scales (scaleout.md §2.5).

State-dict entries (the loader packs the per-expert checkpoint tensors into them):
    gate_up_proj [E, 2I, H] e4m3   gate_up_proj_scale_inv [E, 2I/bo, ceil(H/bi)] fp32
    down_proj    [E, H, I]  e4m3   down_proj_scale_inv    [E, ceil(H/bo), ceil(I/bi)] fp32
(gate rows then up rows per expert, so I must be a multiple of bo: no scale row mixes the two.)

"fp8" (W8A16) dequantizes per call with the loader's `dequantize_blockwise`, in the layout that
dequantize-at-load leaves (input-major on CPU), then runs RoutedExperts' own math: bit-identical
to "dequant". The native path dequantizes the layer's local stacks (the CPU test path); the
batch-1 path only the k routed experts (gathered on the device). "fp8_w8a8" runs kernels.fused_moe_fp8 (Triton on CUDA,
its torch reference on CPU), which quantizes activations per token before gate_up and down.
"""

from __future__ import annotations

import torch
from torch import nn

from inference.config import ModelConfig
from inference.fp8 import dequantize_blockwise, scale_shape
from inference.layers import kernel_path
from inference.layers.moe import RoutedExperts
from inference.parallel.state import ParallelState

E4M3 = torch.float8_e4m3fn


def _input_major(w: torch.Tensor) -> torch.Tensor:
    return w.transpose(-1, -2).contiguous().transpose(-1, -2)


class Fp8RoutedExperts(RoutedExperts):
    def __init__(self, config: ModelConfig, block: tuple[int, int], mode: str = "fp8",
                 parallel: ParallelState | None = None):
        nn.Module.__init__(self)
        parallel = parallel or ParallelState.single()
        # Expert parallelism as RoutedExperts: experts [e0, e0 + e) of this rank's ep group, each
        # this rank's part i of the intermediate size.
        self.e0, e = parallel.experts(config.n_routed_experts)
        self.n_global = config.n_routed_experts
        h, i = config.hidden_size, parallel.expert_intermediate(config.moe_intermediate_size)[1]
        if i % block[0]:
            raise ValueError(
                f"moe_intermediate_size={config.moe_intermediate_size} (this rank's part: {i}) is not a multiple of "
                f"the FP8 row block {block[0]}: packed gate/up experts cannot keep their block scales "
                "(use weight_format='dequant')"
            )
        self.block = tuple(block)
        self.mode = mode
        self.input_major = False
        self.gate_up_proj = nn.Parameter(torch.empty(e, 2 * i, h, dtype=E4M3), requires_grad=False)
        self.gate_up_proj_scale_inv = nn.Parameter(torch.empty(e, *scale_shape((2 * i, h), block)), requires_grad=False)
        self.down_proj = nn.Parameter(torch.empty(e, h, i, dtype=E4M3), requires_grad=False)
        self.down_proj_scale_inv = nn.Parameter(torch.empty(e, *scale_shape((h, i), block)), requires_grad=False)

    def fuse(self) -> None:
        # RoutedExperts stores dense stacks input-major on CPU; the per-call dequantization
        # reproduces that layout instead of re-laying out the FP8 bytes.
        self.input_major = self.gate_up_proj.device.type == "cpu"

    def _dequant(self, q: torch.Tensor, scale: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
        w = dequantize_blockwise(q, scale, self.block, dtype)
        return _input_major(w) if self.input_major else w

    def dense_stacks(self, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
        return (
            self._dequant(self.gate_up_proj, self.gate_up_proj_scale_inv, dtype),
            self._dequant(self.down_proj, self.down_proj_scale_inv, dtype),
        )

    def _w8a8(self, x, ids, weights, backend: str) -> torch.Tensor:
        from kernels.fused_moe_fp8 import fused_moe_fp8

        return fused_moe_fp8(
            x, self.gate_up_proj, self.gate_up_proj_scale_inv, self.down_proj, self.down_proj_scale_inv,
            ids, weights, self.block, backend=backend,
        )  # fmt: skip

    def forward(self, x: torch.Tensor, ids: torch.Tensor, weights: torch.Tensor, kernels: str | None = None,
                out_dtype: torch.dtype | None = None) -> torch.Tensor:
        if self.is_sharded:
            ids = self.local_ids(ids)  # another rank's experts -> E_local, skipped below
        if self.mode == "fp8_w8a8":
            return self._w8a8(x, ids, weights, kernels or "auto").to(out_dtype or x.dtype)
        if kernels is not None:
            # Only the experts this batch routes to, renumbered: the kernel's result per expert
            # does not depend on which other experts the stack holds.
            n_local = self.gate_up_proj.shape[0]
            local = (ids >= 0) & (ids < n_local)
            active = torch.unique(ids[local])
            if active.numel() == 0:  # every pick is another rank's expert
                return torch.zeros_like(x, dtype=out_dtype or x.dtype)
            remap = torch.full((n_local,), -1, dtype=ids.dtype, device=ids.device)
            remap[active] = torch.arange(active.numel(), dtype=ids.dtype, device=ids.device)
            compact = torch.where(local, remap[ids.clamp(0, n_local - 1)], -1)
            gate_up = self._dequant(self.gate_up_proj[active], self.gate_up_proj_scale_inv[active], x.dtype)
            down = self._dequant(self.down_proj[active], self.down_proj_scale_inv[active], x.dtype)
            return kernel_path.routed_experts(x, gate_up, down, compact, weights, kernels).to(out_dtype or x.dtype)
        if x.shape[0] == 1:
            return self._one_token(x, ids, weights, out_dtype)
        gate_up, down = self.dense_stacks(x.dtype)
        return self.grouped(x, ids, weights, gate_up, down, out_dtype)

    def _one_token(self, x: torch.Tensor, ids: torch.Tensor, weights: torch.Tensor,
                   out_dtype: torch.dtype | None) -> torch.Tensor:
        """Batch-1 steps: dequantize only the k routed experts (gathered on the device, no host
        sync), in expert order, and run the same grouped math over that compact stack: bit for bit
        what the full stack gives (each expert's GEMM and the per-token sum order are the same)."""
        n_local, k = self.gate_up_proj.shape[0], ids.shape[1]
        chosen = ids[0].sort().values  # distinct; another rank's experts (id n_local) last
        safe = chosen.clamp(max=n_local - 1)
        gate_up = self._dequant(self.gate_up_proj.index_select(0, safe),
                                self.gate_up_proj_scale_inv.index_select(0, safe), x.dtype)  # fmt: skip
        down = self._dequant(self.down_proj.index_select(0, safe), self.down_proj_scale_inv.index_select(0, safe), x.dtype)
        rank = torch.searchsorted(chosen, ids[0])
        compact = torch.where(ids[0] < n_local, rank, k).view(1, k)
        return self.grouped(x, compact, weights, gate_up, down, out_dtype)
