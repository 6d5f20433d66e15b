"""Mixture of experts: fp32 sigmoid router with group-limited top-k, routed experts, shared expert.

Routing (noaux_tc): s = sigmoid(x W^T) in fp32; experts are chosen by s + e_score_correction_bias,
first restricted to the `topk_group` best groups (a group scores the sum of its two best experts),
but weighted by s itself, renormalised over the chosen k and scaled by routed_scaling_factor.

The experts run as two grouped GEMMs: the (token, expert) assignments are sorted by expert so each
expert sees one contiguous slice, and `grouped_mm` multiplies every slice by its expert's weights
in one call (on CUDA the Triton fused_moe kernel of `kernels` does it instead, see kernel_path.py). The expert weights are packed [E, 2I, H] (gate rows then up rows) and [E, H, I]; on CPU,
`fuse` stores them input-major (same shapes and values, see fusion.column_major).

Expert parallelism: every rank routes every token (the router is replicated), but holds only the
experts [e0, e0 + E_local) of its ep group, each possibly split by intermediate size over the
group's ranks. Assignments to experts another rank owns are dropped here (the fused kernel skips
ids outside [0, E_local) itself); the routed and the shared expert's partial sums are added and
reduced together by one all-reduce in the decoder layer (in fp32 for bf16/fp16: the partial is
accumulated in fp32, see parallel/partial_sums.py).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from inference.config import ModelConfig
from inference.layers import kernel_path
from inference.layers.fusion import column_major
from inference.layers.mlp import SwiGLU
from inference.parallel.partial_sums import accumulate_dtype
from inference.parallel.state import ParallelState

_grouped_mm = getattr(F, "grouped_mm", None) or getattr(torch, "_grouped_mm", None)
# grouped_mm takes fp32 and bf16 on CPU but only bf16 on CUDA.
_GROUPED_DTYPES = {"cpu": (torch.float32, torch.bfloat16), "cuda": (torch.bfloat16,)}


class TopkRouter(nn.Module):
    def __init__(self, config: ModelConfig):
        super().__init__()
        self.top_k = config.num_experts_per_tok
        self.n_experts = config.n_routed_experts
        self.n_group = config.n_group
        self.topk_group = config.topk_group
        self.norm_topk_prob = config.norm_topk_prob
        self.scaling = config.routed_scaling_factor
        self.weight = nn.Parameter(torch.zeros(self.n_experts, config.hidden_size, dtype=torch.float32))
        self.e_score_correction_bias = nn.Parameter(
            torch.zeros(self.n_experts, dtype=torch.float32), requires_grad=False
        )

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """x [N, H] -> (expert ids [N, k], weights [N, k] fp32)."""
        scores = F.linear(x.float(), self.weight.float()).sigmoid()
        choice = scores + self.e_score_correction_bias
        if self.n_group > 1 and self.topk_group < self.n_group:
            grouped = choice.view(-1, self.n_group, self.n_experts // self.n_group)
            group_scores = grouped.topk(2, dim=-1).values.sum(-1)
            keep = group_scores.topk(self.topk_group, dim=-1).indices
            group_mask = torch.zeros_like(group_scores, dtype=torch.bool).scatter_(1, keep, True)
            choice = grouped.masked_fill(~group_mask.unsqueeze(-1), float("-inf")).view(-1, self.n_experts)
        ids = choice.topk(self.top_k, dim=-1).indices
        weights = scores.gather(1, ids)
        if self.norm_topk_prob:
            weights = weights / (weights.sum(-1, keepdim=True) + 1e-20)
        return ids, weights * self.scaling


class RoutedExperts(nn.Module):
    def __init__(self, config: ModelConfig, parallel: ParallelState | None = None):
        super().__init__()
        parallel = parallel or ParallelState.single()
        self.e0, e = parallel.experts(config.n_routed_experts)
        self.n_global = config.n_routed_experts
        h, i = config.hidden_size, parallel.expert_intermediate(config.moe_intermediate_size)[1]
        self.gate_up_proj = nn.Parameter(torch.empty(e, 2 * i, h))
        self.down_proj = nn.Parameter(torch.empty(e, h, i))

    def fuse(self) -> None:
        # CPU only: the GPU kernels expect the packed [E, out, in] rows as loaded.
        if self.gate_up_proj.device.type == "cpu":
            self.gate_up_proj = column_major(self.gate_up_proj)
            self.down_proj = column_major(self.down_proj)

    @property
    def is_sharded(self) -> bool:
        return self.gate_up_proj.shape[0] != self.n_global

    def local_ids(self, ids: torch.Tensor) -> torch.Tensor:
        """Global expert ids -> this rank's [0, E_local); another rank's experts -> E_local."""
        n_local = self.gate_up_proj.shape[0]
        local = ids - self.e0
        return local.masked_fill((local < 0) | (local >= n_local), n_local)

    def forward(self, x: torch.Tensor, ids: torch.Tensor, weights: torch.Tensor, kernels: str | None = None,
                out_dtype: torch.dtype | None = None) -> torch.Tensor:
        """The weighted sum of the routed experts' outputs, accumulated in `out_dtype` (default
        x's; fp32 for a partial sum that parallel/partial_sums.py reduces in fp32)."""
        if self.is_sharded:
            ids = self.local_ids(ids)
        if kernels is not None:
            routed = kernel_path.routed_experts(x, self.gate_up_proj, self.down_proj, ids, weights, kernels)
            return routed.to(out_dtype or x.dtype)
        return self.grouped(x, ids, weights, self.gate_up_proj, self.down_proj, out_dtype)

    def grouped(self, x, ids, weights, gate_up: torch.Tensor, down: torch.Tensor,
                out_dtype: torch.dtype | None = None) -> torch.Tensor:
        """The native path over the given expert stacks (fp8_experts.py passes dequantized ones),
        summed in `out_dtype` (default x's).

        NOTE: no host sync where grouped_mm takes the dtype (every decode step of a CUDA graph or
        of the no-sync test): the expert counts come from a fixed-size scatter, not bincount
        (whose output size depends on the ids), and another rank's assignments stay in the
        sorted list with weight 0 instead of being cut off at a count read on the host."""
        acc = out_dtype or x.dtype
        n, k = ids.shape
        n_experts = gate_up.shape[0]
        flat = ids.reshape(-1)
        order = flat.argsort(stable=True)  # another rank's experts (id E_local) sort last
        counts = torch.zeros(n_experts + 1, dtype=torch.long, device=ids.device)
        counts = counts.scatter_add_(0, flat, torch.ones_like(flat))[:n_experts]
        token = order // k
        xs = x.index_select(0, token)
        route = weights.reshape(-1)[order].unsqueeze(-1)
        if _grouped_mm is not None and x.dtype in _GROUPED_DTYPES.get(x.device.type, ()) and \
                not torch.compiler.is_compiling():  # (traced, a GEMM per expert is as fast and takes fp32)
            ends = counts.cumsum(0).to(torch.int32)
            gate, up = _grouped_mm(xs, gate_up.transpose(1, 2), offs=ends).chunk(2, dim=-1)
            ys = _grouped_mm(F.silu(gate) * up, down.transpose(1, 2), offs=ends)
            if self.is_sharded:  # rows past the last local expert are not computed: drop them
                ys = torch.where((flat[order] < n_experts).unsqueeze(-1), ys, 0)
        else:
            ys = self._per_expert(xs, counts, gate_up, down)
        ys = ys.to(acc) * route.to(acc)
        return torch.zeros_like(x, dtype=acc).index_add_(0, token, ys)

    def _per_expert(self, xs: torch.Tensor, counts: torch.Tensor, gate_up, down) -> torch.Tensor:
        """One GEMM pair per expert over its slice of the sorted rows (never per token), for dtypes
        grouped_mm lacks and for batched steps under torch.compile (fp32). Reads the counts on
        the host; compiled, they are symbolic sizes and an empty slice costs next to nothing.
        Rows of another rank's experts (past the last count) stay zero."""
        compiling = torch.compiler.is_compiling()
        # NOTE: traced, item() per count, not tolist(): dynamo turns tolist() into getitem nodes
        # AOTAutograd's cache cannot key, so every process redid the AOT pass (57 s vs 19 s for a
        # cached tiny graph). Eagerly tolist() stays: one host sync, not one per expert.
        sizes = [c.item() for c in counts.unbind(0)] if compiling else counts.tolist()
        local = xs if not self.is_sharded else xs[: sum(sizes)]  # (sharded steps run eagerly)
        outs = []
        for e, part in enumerate(local.split(sizes, dim=0)):
            if not compiling and not sizes[e]:
                continue
            gate, up = F.linear(part, gate_up[e]).chunk(2, dim=-1)
            outs.append(F.linear(F.silu(gate) * up, down[e]))
        outs.append(xs.new_zeros(xs.shape[0] - local.shape[0], xs.shape[1]))
        return torch.cat(outs)


class MoE(nn.Module):
    def __init__(self, config: ModelConfig, parallel: ParallelState | None = None):
        super().__init__()
        parallel = parallel or ParallelState.single()
        self.gate = TopkRouter(config)  # replicated: every rank routes every token the same way
        self.world, self.reduce_fp32 = parallel.world, parallel.reduce_fp32
        self.dp = parallel.dp  # DP attention: the token exchange around the routed experts
        self.dp_shared_split = parallel.dp_split_extras  # ... and the shared expert's slice (dp_extras.py)
        self.experts = RoutedExperts(config, parallel)
        shared = config.moe_intermediate_size * config.n_shared_experts
        self.shared_experts = SwiGLU(config.hidden_size, parallel.split(shared, "moe_intermediate_size * n_shared_experts")[1])

    def forward(self, x: torch.Tensor, kernels: str | None = None) -> torch.Tensor:
        """This rank's partial sum of routed + shared outputs; under parallelism with bf16/fp16
        it stays fp32 until the reduce (parallel/partial_sums.py), as DeepSeek's MoE does."""
        acc = accumulate_dtype(self.world, self.reduce_fp32, x.dtype)
        if self.dp is not None:
            return self._dp_forward(x, kernels, acc)
        ids, weights = self.gate(x)
        return self.experts(x, ids, weights, kernels, acc) + self.shared_experts(x, acc)

    def _dp_forward(self, x: torch.Tensor, kernels: str | None, acc: torch.dtype) -> torch.Tensor:
        """Every rank's tokens through this rank's experts, the sums back to their owners. A split
        shared expert runs its slice on the same gathered rows and its partial joins the routed
        one's reduce-scatter (one exchange per layer); a replicated one runs on this rank's own tokens."""
        dp = self.dp
        gathered = dp.gather(x)
        ids, weights = self.gate(gathered)
        # Padding rows (zeros) route somewhere too; a zero weight makes their contribution exactly 0.
        weights = weights.masked_fill(dp.pad_rows(x.device).unsqueeze(1), 0.0)
        partial = self.experts(gathered, ids, weights, kernels, acc)
        if self.dp_shared_split:
            return dp.scatter(partial + self.shared_experts(gathered, acc))
        routed = dp.scatter(partial)
        return routed + self.shared_experts(x, acc) if x.shape[0] else routed

