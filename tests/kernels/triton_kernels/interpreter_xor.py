"""A numpy fast path for `xor_sum` in the Triton interpreter (CPU runs of these tests only).

`tl.sort` on integer keys flips its compare-and-swap with `xor_sum`, and Triton's interpreter
(3.9) reduces any combine function it does not recognise element by element in Python
(`ReduceOps.generic_reduce`): one Python call per element and stage. That was 3/4 of the fused
indexer top-k tests' time (k = 1000 sorts 1024-key lists). The interpreter already maps sum, max,
min and argmax/argmin to numpy; this adds xor, which is exact on integers and independent of the
order of reduction, so results are bit for bit those of the generic path
(test_interpreter_xor.py checks it against a Python fold)."""

from __future__ import annotations

import numpy as np


def install() -> bool:
    """Patch `ReduceOps.apply_impl` once; False when the interpreter or `_xor_combine` is not there."""
    from triton.language import standard
    from triton.runtime import interpreter

    ops, combine = getattr(interpreter, "ReduceOps", None), getattr(standard, "_xor_combine", None)
    if ops is None or combine is None:
        return False
    if getattr(ops.apply_impl, "horizon_xor_fast_path", False):
        return True
    generic = ops.apply_impl

    def apply_impl(self, input):
        if self.combine_fn is combine and len(input) == 1:
            data = np.bitwise_xor.reduce(input[0].handle.data, axis=self.axis, keepdims=self.keep_dims)
            return self.to_tensor(data, input[0].dtype)
        return generic(self, input)

    apply_impl.horizon_xor_fast_path = True
    ops.apply_impl = apply_impl
    return True
