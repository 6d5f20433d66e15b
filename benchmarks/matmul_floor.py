"""How fast could a step be? Replay only its matrix multiplies.

A decode step at small batch is bound by streaming weights through the matmuls; everything else
(norms, RoPE, routing, cache writes, Python) is overhead a compiler or CUDA graph could remove.
`record_matmuls` runs a step once under a dispatch mode and keeps every matmul-family call with
its real operands (the model's own weight tensors, so the same memory is touched in the same
order); `replay_seconds` then times those calls alone. The result is the step's matmul floor on
this machine, and `transformers_step / our_floor` bounds the ratio any implementation with the same
matmul kernels could reach. Both sides are recorded the same way, so their floors compare too.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

import torch
from torch.utils._python_dispatch import TorchDispatchMode

aten = torch.ops.aten
MATMUL_OPS = {
    aten.linear, aten.matmul, aten.mm, aten.addmm, aten.bmm, aten.baddbmm, aten.mv, aten.addmv, aten._grouped_mm,
    aten._weight_int8pack_mm, aten.dot,
}  # fmt: skip


@dataclass
class MatmulTrace:
    calls: list[tuple] = field(default_factory=list)  # (op, args, kwargs)

    def weight_bytes(self, model: torch.nn.Module) -> int:
        """Bytes of `model`'s parameters the step multiplied by (each distinct view counted once)."""
        owned = {p.untyped_storage().data_ptr() for p in model.parameters()}
        seen: dict[tuple, int] = {}
        for _, args, _ in self.calls:
            for a in args:
                if isinstance(a, torch.Tensor) and a.untyped_storage().data_ptr() in owned:
                    seen[(a.untyped_storage().data_ptr(), a.storage_offset(), a.shape)] = a.numel() * a.element_size()
        return sum(seen.values())


class _Recorder(TorchDispatchMode):
    def __init__(self, trace: MatmulTrace):
        super().__init__()
        self.trace = trace

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        if func.overloadpacket in MATMUL_OPS and "out" not in kwargs:
            self.trace.calls.append((func, args, kwargs))
        return out


def record_matmuls(step: Callable[[], object]) -> MatmulTrace:
    """Run `step` once, keeping every matmul it issued (its operands stay referenced)."""
    trace = MatmulTrace()
    with torch.inference_mode(), _Recorder(trace):
        step()
    return trace


def replay_seconds(trace: MatmulTrace, reps: int = 5) -> float:
    """CPU time of the recorded matmuls alone, best of `reps` (the first pass also warms up)."""
    best = float("inf")
    with torch.inference_mode():
        for _ in range(reps + 1):
            start = time.process_time()
            for func, args, kwargs in trace.calls:
                func(*args, **kwargs)
            best = min(best, time.process_time() - start)
    return best
