"""Triton kernels for GLM-5.x serving, each with a plain-torch reference of the same signature.

Dispatchers pick Triton for CUDA tensors and the reference otherwise (``backend=`` overrides;
see kernels.backend). Paged caches are addressed by flat slot ids: slot = page * page_size + offset.
"""

from kernels.backend import BACKENDS, resolve_backend
from kernels.fused_moe import fused_moe, fused_moe_torch, fused_moe_triton
from kernels.indexer_topk import IndexerTopk, indexer_scores, indexer_scores_torch, indexer_scores_triton, indexer_topk
from kernels.paged_slots import slots_from_block_table
from kernels.sparse_mla import sparse_mla_attention, sparse_mla_torch, sparse_mla_triton

__all__ = [
    "BACKENDS",
    "IndexerTopk",
    "fused_moe",
    "fused_moe_torch",
    "fused_moe_triton",
    "indexer_scores",
    "indexer_scores_torch",
    "indexer_scores_triton",
    "indexer_topk",
    "resolve_backend",
    "slots_from_block_table",
    "sparse_mla_attention",
    "sparse_mla_torch",
    "sparse_mla_triton",
]
