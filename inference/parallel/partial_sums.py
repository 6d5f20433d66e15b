"""Partial sums across ranks, and the precision they are summed in.

Under tensor parallelism each rank computes part of a sum: o_proj over its heads, the dense and
shared MLPs over their intermediate slice, the routed experts over its experts (DP attention's MoE
too). A reduce makes the sum whole. With bf16/fp16 activations the partials are kept in fp32 by
default: the row-parallel GEMMs write fp32 (layers/partial_linear.py), the MoE accumulates its
routed and shared outputs in fp32 (as DeepSeek's reference MoE does), and the all-reduce runs in
fp32 (as DeepSeek's RowParallelLinear does), so the whole sum is rounded to the model dtype once.
vLLM and SGLang reduce in the model dtype, half the bytes per all-reduce;
`ParallelConfig(reduce_dtype="model")` (`horizon serve --reduce-dtype model`) chooses that.

NOTE: an up-cast at the reduce alone changes nothing for two ranks (two bf16 addends are rounded
once either way); the gain comes from never rounding a rank's partial before the reduce.
NOTE: the vocab-parallel embedding's all-reduce stays in the model dtype: each row comes from one
rank and the others add zeros, so that sum is exact.
NOTE: one process (world 1) keeps the model dtype everywhere, bit for bit as without parallelism.
"""

from __future__ import annotations

import torch

from inference.parallel.comm import Comm

HALF_DTYPES = (torch.bfloat16, torch.float16)


def accumulate_dtype(world: int, reduce_fp32: bool, dtype: torch.dtype) -> torch.dtype:
    """The dtype a rank accumulates a partial sum in, for activations of `dtype`."""
    return torch.float32 if world > 1 and reduce_fp32 and dtype in HALF_DTYPES else dtype


def all_reduce_partial(comm: Comm, partial: torch.Tensor, dtype: torch.dtype, reduce_fp32: bool) -> torch.Tensor:
    """The sum of every rank's `partial`, returned in `dtype` (the hidden state's)."""
    return comm.all_reduce(partial.to(accumulate_dtype(comm.world, reduce_fp32, partial.dtype))).to(dtype)
