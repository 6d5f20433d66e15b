"""`xor_sum` and integer `tl.sort` (which uses it) against a plain Python fold and torch.sort: on a
CPU through interpreter_xor's numpy fast path, on CUDA compiled."""

from __future__ import annotations

import functools
import operator

import pytest
import torch

from kernels.backend import TritonKernel, tl


def _xor_kernel(x_ptr, rows_ptr, cols_ptr, all_ptr, sorted_ptr, R: tl.constexpr, C: tl.constexpr,
                UPCAST: tl.constexpr):  # fmt: skip
    offs_r, offs_c = tl.arange(0, R), tl.arange(0, C)
    x = tl.load(x_ptr + offs_r[:, None] * C + offs_c[None, :])
    tl.store(rows_ptr + offs_r, tl.xor_sum(x, axis=1))
    tl.store(cols_ptr + offs_c, tl.xor_sum(x, axis=0))
    tl.store(all_ptr, tl.xor_sum(tl.reshape(x, [R * C]), axis=0))
    tl.store(sorted_ptr + tl.arange(0, R * C), tl.sort(tl.reshape(x, [R * C]), descending=True))


KERNEL = TritonKernel(_xor_kernel)


@pytest.mark.parametrize("dtype", [torch.int32, torch.int64])
def test_xor_sum_and_integer_sort(dtype, device, gen):
    if device.type == "cpu":
        from triton.runtime.interpreter import ReduceOps

        assert getattr(ReduceOps.apply_impl, "horizon_xor_fast_path", False)  # conftest installed it
    info = torch.iinfo(dtype)
    x = torch.randint(info.min, info.max, (4, 16), generator=gen, dtype=torch.int64).to(dtype)
    x[1, 3:9] = x[1, 2]  # repeated keys: sorting must keep every copy
    rows, cols, whole = (torch.empty(n, dtype=dtype, device=device) for n in (4, 16, 1))
    out = torch.empty(64, dtype=dtype, device=device)
    KERNEL.launch((1,), x.to(device), rows, cols, whole, out, R=4, C=16, device=device)

    def fold(values) -> int:
        return functools.reduce(operator.xor, (int(v) for v in values), 0)

    assert rows.cpu().tolist() == [fold(r) for r in x]
    assert cols.cpu().tolist() == [fold(c) for c in x.T]
    assert whole.item() == fold(x.flatten())
    assert torch.equal(out.cpu(), torch.sort(x.flatten(), descending=True).values)
