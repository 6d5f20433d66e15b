"""Multi-head latent attention (MLA) with DSA sparse selection over a paged latent cache.

Each token caches one row: kv_a_layernorm(c) [kv_lora_rank] followed by its rotated rope key.
Two mathematically equal ways to attend over that cache:
- expanded (prefill): run kv_b_proj over every visible key to get per-head k_nope and v, then
  ordinary attention with q = [q_nope | q_pe] (256 wide for GLM-5);
- absorbed (decode): fold kv_b_proj's key half into the query (q_nope . W_UK -> latent space) and
  its value half into the output, so attention runs directly on the cached rows (576 wide) and the
  cost per step no longer grows with kv_b_proj x context.

Once the indexer selects (a row sees more than `index_topk` keys), the native path attends
sparsely: each query row gathers its `index_topk` selected rows and runs the absorbed form over
them alone, so the cost follows index_topk instead of the context (DSA's point; transformers and
the dense forms here compute every score and mask all but the selected ones, the same function).

The kernel path (kernel_path.py) attends absorbed over each token's selected rows, except the
tokens of long chunks that expanded_prefill.py finds cheaper in the expanded form.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from inference.config import ModelConfig
from inference.forward_batch import AttentionMetadata
from inference.layers import expanded_prefill, kernel_path
from inference.layers.expanded_prefill import ABSORB_MAX_QUERY_LEN, MlaDims
from inference.layers.fp8_linear import Fp8Linear, linear
from inference.layers.fusion import fuse_linears, input_major_on_cpu
from inference.layers.indexer import MAX_SCORE_ELEMENTS, Indexer, TopkSelection
from inference.layers.norm import RMSNorm
from inference.layers.partial_linear import partial_linear
from inference.layers.rope import RopeTables, deinterleave_rope_rows
from inference.parallel.partial_sums import accumulate_dtype
from inference.parallel.state import ParallelState

# Native path: batches whose longest per-sequence chunk is at most ABSORB_MAX_QUERY_LEN tokens use
# the absorbed form (decode, MTP verification); longer chunks use the expanded form.
# Largest [rows, index_topk, rank + rope] block of gathered cache rows the sparse form holds at once.
SPARSE_GATHER_ELEMENTS = 1 << 24


class MLAttention(nn.Module):
    def __init__(self, config: ModelConfig, has_indexer: bool, parallel: ParallelState | None = None):
        super().__init__()
        # Tensor parallelism splits the heads (q_b, kv_b by rows, o_proj by columns: o_proj then
        # returns this rank's partial sum, reduced by the decoder layer). The latent cache, q_a,
        # kv_a, the norms and the indexer are replicated: MLA has one latent "KV head".
        parallel = parallel or ParallelState.single()
        self.n_heads = parallel.heads(config.num_attention_heads)[1]
        self.tp, self.reduce_fp32 = parallel.tp, parallel.reduce_fp32
        self.nope = config.qk_nope_head_dim
        self.rope = config.qk_rope_head_dim
        self.v_dim = config.v_head_dim
        self.rank = config.kv_lora_rank
        self.scale = config.softmax_scale
        h = config.hidden_size
        self.q_a_proj = nn.Linear(h, config.q_lora_rank, bias=False)
        self.q_a_layernorm = RMSNorm(config.q_lora_rank, config.latent_norm_eps)
        self.q_b_proj = nn.Linear(config.q_lora_rank, self.n_heads * config.qk_head_dim, bias=False)
        self.kv_a_proj_with_mqa = nn.Linear(h, self.rank + self.rope, bias=False)
        self.kv_a_layernorm = RMSNorm(self.rank, config.latent_norm_eps)
        self.kv_b_proj = nn.Linear(self.rank, self.n_heads * (self.nope + self.v_dim), bias=False)
        self.o_proj = nn.Linear(self.n_heads * self.v_dim, h, bias=False)
        self.indexer = Indexer(config) if has_indexer else None
        self.topk = config.index_topk  # expanded_prefill's rule, in IndexShare's indexer-less layers too
        self.dims = MlaDims(self.n_heads, self.rank, self.rope, self.nope, self.v_dim)
        self.in_proj: torch.Tensor | None = None
        self.in_split: list[int] = []
        self.rope_deinterleaved = False

    def fuse(self) -> None:
        """Prepare loaded weights for inference (once): permute the rope rows so RoPE is the cheap
        half-split form (rope.py), and run every projection of the layer input as one GEMM
        (q_a, kv_a and the indexer's wk and, when it shares the dtype, weights_proj)."""
        if self.rope_deinterleaved:
            return
        deinterleave_rope_rows(self.q_b_proj.weight, self.nope + self.rope, self.nope, self.rope)
        deinterleave_rope_rows(self.kv_a_proj_with_mqa.weight, self.rank + self.rope, self.rank, self.rope)
        self.rope_deinterleaved = True
        if self.indexer is not None:
            self.indexer.deinterleave_rope_rows()
        linears = [self.q_a_proj, self.kv_a_proj_with_mqa]
        # FP8 q_a + kv_a fuse among themselves; the indexer's wk stays in the model dtype (fp8_resident.py).
        if self.indexer is not None and not isinstance(self.q_a_proj, Fp8Linear):
            linears.append(self.indexer.wk)
            if self.indexer.weights_proj.weight.dtype == self.q_a_proj.weight.dtype:
                linears.append(self.indexer.weights_proj)
        self.in_split = [lin.weight.shape[0] for lin in linears]
        self.in_proj = fuse_linears(linears)
        # After the rope permutation above, which rewrites rows in place of a row-major weight.
        input_major_on_cpu(self.q_b_proj, self.o_proj, *([self.indexer.wq_b] if self.indexer is not None else []))

    def _project_input(self, x: torch.Tensor):
        if self.in_proj is None:
            parts = [self.q_a_proj(x), self.kv_a_proj_with_mqa(x)]
        else:
            parts = list(linear(x, self.in_proj).split(self.in_split, dim=-1))
        return parts + [None] * (4 - len(parts))

    def forward(
        self,
        x: torch.Tensor,
        rope: RopeTables,
        meta: AttentionMetadata,
        latent_cache,
        indexer_cache,
        shared_selection: TopkSelection | torch.Tensor | None,
        mode: str = "auto",
        kernels: str | None = None,
        reuse_selection: bool = False,
    ) -> tuple[torch.Tensor, TopkSelection | torch.Tensor | None]:
        """x [N, hidden] -> (out [N, hidden], the selection this layer used).

        reuse_selection: attend over `shared_selection` even though this layer has an indexer,
        which then does not run (MTP draft steps under index_share_for_mtp_iteration).

        latent_cache / indexer_cache are the layer's row stores (kv_formats.py): rows are written
        by slot and read back, in the model dtype, by slot.

        The selection is a TopkSelection (or None = all visible) on the native path, and cache
        slots [N, K] when `kernels` names a kernels backend (see kernel_path.py). `mode`: "auto"
        (sparse over the selection when there is one, else absorbed for short query chunks and
        expanded otherwise; the kernel path decides per sequence, expanded_prefill.py), or one form
        forced: "sparse", "absorbed" or "expanded" (the dense forms mask everything but the
        selection; tests use them as references)."""
        n = x.shape[0]
        q_a, kv_a, index_k, index_w = self._project_input(x)
        q_latent = self.q_a_layernorm(q_a)
        q = self.q_b_proj(q_latent).view(n, self.n_heads, self.nope + self.rope)
        q_nope, q_pe = q.split([self.nope, self.rope], dim=-1)
        q_pe = rope.apply(q_pe, self.rope_deinterleaved)
        c, k_pe = kv_a.split([self.rank, self.rope], dim=-1)
        row = torch.cat([self.kv_a_layernorm(c), rope.apply(k_pe, self.rope_deinterleaved)], dim=-1)
        latent_cache.write(meta.slot_mapping, row)

        if mode not in ("auto", "sparse", "absorbed", "expanded"):
            raise ValueError(f"attention mode={mode!r}: expected 'auto', 'sparse', 'absorbed' or 'expanded'")
        own_indexer = self.indexer is not None and not reuse_selection
        if kernels is not None:
            if own_indexer:
                selection = self.indexer.select_slots(x, q_latent, rope, meta, indexer_cache, index_k, index_w, kernels)
            else:
                selection = shared_selection
            out = self._kernel_attention(q_nope, q_pe, latent_cache, selection, meta, mode, kernels)
            return self._output(out), selection
        if own_indexer:
            selection = self.indexer(x, q_latent, rope, meta, indexer_cache, index_k, index_w)
        else:
            selection = shared_selection
        if selection is not None and mode in ("auto", "sparse"):
            return self._output(self._sparse(q_nope, q_pe, latent_cache, selection, meta)), selection
        hidden = meta.key_hidden if selection is None else ~selection.mask(meta.max_seq_len)
        keys = meta.gather_keys(latent_cache).to(x.dtype)  # [B, S, rank + rope]

        if mode in ("auto", "sparse"):
            mode = "absorbed" if meta.max_query_len <= ABSORB_MAX_QUERY_LEN else "expanded"
        if mode == "absorbed":
            out = self._absorbed(q_nope, q_pe, keys, hidden, meta)
        else:
            out = self._expanded(q_nope, q_pe, keys, hidden, meta)
        return self._output(out), selection

    def _output(self, heads: torch.Tensor) -> torch.Tensor:
        """o_proj: under TP this rank's partial sum, in the dtype the reduce sums it in."""
        return partial_linear(self.o_proj, heads, accumulate_dtype(self.tp, self.reduce_fp32, heads.dtype))

    def _absorb_keys(self, q_nope: torch.Tensor) -> torch.Tensor:
        w_uk = self.kv_b_proj.weight.view(self.n_heads, self.nope + self.v_dim, self.rank)[:, : self.nope]
        return torch.bmm(q_nope.transpose(0, 1), w_uk).transpose(0, 1)  # [N, H, rank]

    def _absorb_values(self, out_lat: torch.Tensor) -> torch.Tensor:
        w_uv = self.kv_b_proj.weight.view(self.n_heads, self.nope + self.v_dim, self.rank)[:, self.nope :]
        out = torch.bmm(out_lat.transpose(0, 1), w_uv.transpose(1, 2))  # [H, N, v]
        # clone, not reshape: whether reshape could return a view depends on N == 1, which a traced
        # step would have to guard on (one graph more for decode graphs).
        return out.transpose(0, 1).clone(memory_format=torch.contiguous_format).view(-1, self.n_heads * self.v_dim)

    def _kernel_attention(self, q_nope, q_pe, latent_cache, slots, meta, mode: str, backend: str) -> torch.Tensor:
        """[N, H * v]: absorbed over the selected rows, but expanded for the tokens `plan` picks."""
        plan = expanded_prefill.plan(meta, mode, self.topk, self.dims)
        if plan is None:  # decode: always here, without a host sync
            return self._sparse_kernel(q_nope, q_pe, latent_cache, slots, backend)
        out = q_nope.new_empty(q_nope.shape[0], self.n_heads * self.v_dim)
        q = torch.cat([q_nope[plan.tokens], q_pe[plan.tokens]], dim=-1)
        out[plan.tokens] = expanded_prefill.attend(
            plan, q, latent_cache, self.kv_b_proj, meta, slots, self.dims, self.scale, backend
        ).to(out.dtype)  # fmt: skip
        if plan.absorbed.numel():
            rows = plan.absorbed
            out[rows] = self._sparse_kernel(q_nope[rows], q_pe[rows], latent_cache, slots[rows], backend)
        return out

    def _sparse_kernel(self, q_nope, q_pe, latent_cache, slots, backend: str) -> torch.Tensor:
        q = torch.cat([self._absorb_keys(q_nope), q_pe], dim=-1).to(latent_cache.dtype)  # the model dtype
        out_lat = kernel_path.sparse_latent_attention(q, latent_cache, slots, self.scale, self.rank, backend)
        return self._absorb_values(out_lat.to(q_nope.dtype))

    def _softmax(self, scores: torch.Tensor, hidden: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
        # scores [B, T, H, S]; hidden [B, T, S] marks keys a query may not see; fp32 softmax like
        # every reference.
        scores = scores.masked_fill(hidden.unsqueeze(2), float("-inf"))
        return torch.softmax(scores, dim=-1, dtype=torch.float32).to(dtype)

    def _expanded(self, q_nope, q_pe, keys, hidden, meta: AttentionMetadata) -> torch.Tensor:
        b, s = keys.shape[:2]
        t, h = meta.max_query_len, self.n_heads
        c, k_pe = keys.split([self.rank, self.rope], dim=-1)
        kv = self.kv_b_proj(c).view(b, s, h, self.nope + self.v_dim)
        k_nope, v = kv.split([self.nope, self.v_dim], dim=-1)
        k = torch.cat([k_nope, k_pe.unsqueeze(2).expand(b, s, h, self.rope)], dim=-1)  # [B, S, H, D]
        q = meta.to_padded(torch.cat([q_nope, q_pe], dim=-1)).permute(0, 2, 1, 3).reshape(b * h, t, -1)
        k = k.permute(0, 2, 3, 1).reshape(b * h, -1, s)
        v = v.permute(0, 2, 1, 3).reshape(b * h, s, -1)
        out = q.new_empty(b * h, t, self.v_dim)
        rows = max(1, MAX_SCORE_ELEMENTS // max(1, b * h * s))  # bound the [B, H, rows, S] scores
        for r0 in range(0, t, rows):
            r1 = min(t, r0 + rows)
            scores = torch.bmm(q[:, r0:r1], k) * self.scale  # [B*H, rows, S]
            probs = self._softmax(scores.view(b, h, r1 - r0, s).transpose(1, 2), hidden[:, r0:r1], q.dtype)
            out[:, r0:r1] = torch.bmm(probs.transpose(1, 2).reshape(b * h, r1 - r0, s), v)
        out = out.view(b, h, t, self.v_dim).transpose(1, 2)  # [B, T, H, v]
        return meta.from_padded(out).reshape(-1, h * self.v_dim)

    def _sparse(self, q_nope, q_pe, latent_cache, selection: TopkSelection, meta: AttentionMetadata) -> torch.Tensor:
        """Absorbed attention of every query row over its own selected cache rows only."""
        b, t, k = selection.positions.shape
        n, h = q_nope.shape[0], self.n_heads
        q = torch.cat([self._absorb_keys(q_nope), q_pe], dim=-1)  # [N, H, rank + rope]
        # Cache slot and validity of each token's selected keys, in the flat token order.
        slots = meta.from_padded(meta.key_slots.gather(1, selection.positions.view(b, t * k)).view(b, t, k))
        hidden = ~meta.from_padded(selection.valid).unsqueeze(1)  # [N, 1, K]
        out = q.new_empty(n, h, self.rank)
        rows = max(1, SPARSE_GATHER_ELEMENTS // (k * q.shape[-1]))  # bound the gathered [rows, K, D]
        # NOTE: a decode step is one block, decided by a comparison, not a loop over range(n):
        # traced with a symbolic n, a loop would fix n to the value it was traced with.
        blocks = [(0, n)] if n <= rows else [(r0, min(n, r0 + rows)) for r0 in range(0, n, rows)]
        for r0, r1 in blocks:
            keys = latent_cache.gather(slots[r0:r1].reshape(-1)).to(q.dtype).view(r1 - r0, k, -1)
            scores = torch.bmm(q[r0:r1], keys.transpose(1, 2)) * self.scale  # [rows, H, K]
            scores = scores.masked_fill(hidden[r0:r1], float("-inf"))
            probs = torch.softmax(scores, dim=-1, dtype=torch.float32).to(q.dtype)
            out[r0:r1] = torch.bmm(probs, keys[..., : self.rank])
        return self._absorb_values(out)

    def _absorbed(self, q_nope, q_pe, keys, hidden, meta: AttentionMetadata) -> torch.Tensor:
        # MLA has a single latent "KV head", so all heads and query rows of a sequence share one
        # key matrix: [T*H, rank+rope] x [rank+rope, S] is a single GEMM per sequence.
        b, s = keys.shape[:2]
        t, h = meta.max_query_len, self.n_heads
        q = meta.to_padded(torch.cat([self._absorb_keys(q_nope), q_pe], dim=-1))  # [B, T, H, rank + rope]
        scores = torch.bmm(q.reshape(b, t * h, -1), keys.transpose(1, 2)) * self.scale  # [B, T*H, S]
        probs = self._softmax(scores.view(b, t, h, s), hidden, q.dtype)
        out_lat = torch.bmm(probs.view(b, t * h, s), keys[..., : self.rank])  # [B, T*H, rank]
        return self._absorb_values(meta.from_padded(out_lat.view(b, t, h, self.rank)))
