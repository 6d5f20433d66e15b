"""Triton kernels for GLM-5.x serving, each with a plain-torch reference of the same signature.

Dispatchers pick Triton for CUDA tensors and the reference otherwise (``backend=`` overrides;
see kernels.backend). Paged caches are addressed by flat slot ids: slot = page * page_size + offset.

One DSA attention step of a layer, with the caches of inference/kv_cache.py (rows already written):

    sel = indexer_topk(q_idx, w_idx, indexer_cache, key_slots, seq_of_token, positions,
                       topk=2048, softmax_scale=index_head_dim**-0.5)       # full-indexer layers
    out_lat, _ = sparse_mla_attention(torch.cat([q_absorbed, q_pe], -1), latent_cache, sel.slots,
                                      softmax_scale=qk_head_dim**-0.5, kv_lora_rank=512)
    # out_lat [N, heads, 512] -> W_UV -> o_proj. IndexShare "shared" layers reuse sel.slots.

With an FP8 KV cache (fp8_cache.py layouts) ``indexer_topk_fp8`` and ``sparse_mla_fp8_attention``
read the uint8 cache bytes in place. Long prefill chunks attend in the expanded form instead
(``mla_prefill_attention``: per-head k_nope / v from kv_b_proj, flash attention, an optional DSA
selection as bit words). The routed experts of an MoE layer: ``fused_moe(x, gate_up_proj, down_proj, ids, weights)``.
FP8 weights (e4m3 + block scales): ``w8a8_linear`` / ``act_quant`` + ``fp8_gemm``, ``weight_dequant``
and ``fused_moe_fp8`` (kernels/fp8_gemm.py, kernels/fused_moe_fp8.py).
"""

from kernels.backend import BACKENDS, resolve_backend
from kernels.fp8_gemm import act_quant, fp8_gemm, w8a8_linear, weight_dequant
from kernels.fused_moe import fused_moe, fused_moe_torch, fused_moe_triton
from kernels.fused_moe_fp8 import fused_moe_fp8
from kernels.indexer_topk import IndexerTopk, indexer_scores, indexer_scores_torch, indexer_scores_triton, indexer_topk
from kernels.indexer_topk_fused import indexer_topk_fp8
from kernels.mla_prefill import mla_prefill_attention, selection_bits
from kernels.paged_slots import slots_from_block_table
from kernels.sparse_mla import sparse_mla_attention, sparse_mla_torch, sparse_mla_triton
from kernels.sparse_mla_fp8 import sparse_mla_fp8_attention

__all__ = [
    "BACKENDS",
    "IndexerTopk",
    "act_quant",
    "fp8_gemm",
    "fused_moe_fp8",
    "w8a8_linear",
    "weight_dequant",
    "fused_moe",
    "fused_moe_torch",
    "fused_moe_triton",
    "indexer_scores",
    "indexer_scores_torch",
    "indexer_scores_triton",
    "indexer_topk",
    "indexer_topk_fp8",
    "mla_prefill_attention",
    "resolve_backend",
    "selection_bits",
    "slots_from_block_table",
    "sparse_mla_attention",
    "sparse_mla_fp8_attention",
    "sparse_mla_torch",
    "sparse_mla_triton",
]
