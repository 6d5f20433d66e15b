"""Counting the operations that make the host wait for the device (host syncs), on any device.

On CUDA a host sync stalls the CPU until every queued kernel has run, and breaks CUDA-graph
capture; `torch.cuda.set_sync_debug_mode` reports them there. A CPU has no device to wait for,
so that switch says nothing: `HostSyncCounter` instead records every operation that WOULD sync
on a device, whatever the tensors' device, so a CPU test can check the code the GPU runs:

- reading a tensor's value on the host: `.item()`, `.tolist()`, `.numpy()`, `bool/int/float(t)`
  (seen as Python calls, through a TorchFunctionMode);
- aten ops whose output depends on the data (`torch.Tag.data_dependent_output`, e.g.
  `_local_scalar_dense`) or whose output *shape* does (`torch.Tag.dynamic_output_shape`:
  nonzero, unique, masked_select, bincount, ...), seen through a TorchDispatchMode. Two of those
  are host syncs only in some forms: `index.Tensor` with a boolean mask (a long index is fine)
  and `repeat_interleave` without `output_size`.

    with HostSyncCounter() as syncs:
        model.decode_step(...)
    assert syncs.events == [], syncs.events

NOTE: a Python-level read reaches aten too (`.item()` dispatches `_local_scalar_dense`); it is
counted once, under its Python name, because the dispatch mode is paused while a Python-level
read runs.
"""

from __future__ import annotations

from collections import Counter

import torch
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode

# Python-level reads of a tensor's value (the names torch's __torch_function__ reports).
_HOST_READS = {
    torch.Tensor.item: "item", torch.Tensor.tolist: "tolist", torch.Tensor.numpy: "numpy",
    torch.Tensor.__bool__: "bool", torch.Tensor.__int__: "int", torch.Tensor.__float__: "float",
    torch.Tensor.__index__: "index",
}  # fmt: skip
_MASK_DTYPES = (torch.bool, torch.uint8)


def _syncing_aten(func, args, kwargs) -> str | None:
    """The op's name when this call would make the host wait for the device, else None."""
    packet = func.overloadpacket
    tags = func.tags
    if packet is torch.ops.aten.index or packet is torch.ops.aten.index_put_ or packet is torch.ops.aten.index_put:
        indices = args[1] if len(args) > 1 else kwargs.get("indices", ())
        if any(isinstance(i, torch.Tensor) and i.dtype in _MASK_DTYPES for i in indices or ()):
            return f"{packet.__name__} (boolean mask)"
        return None
    if packet is torch.ops.aten.repeat_interleave:
        sized = kwargs.get("output_size") is not None or func._overloadname == "self_int"
        return None if sized else "repeat_interleave"
    if torch.Tag.data_dependent_output in tags or torch.Tag.dynamic_output_shape in tags:
        return packet.__name__
    if packet in (torch.ops.aten.equal, torch.ops.aten.is_nonzero, torch.ops.aten.allclose):
        return packet.__name__
    return None


class _DispatchCounter(TorchDispatchMode):
    def __init__(self, owner: HostSyncCounter):
        super().__init__()
        self.owner = owner

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if not self.owner.paused:
            name = _syncing_aten(func, args, kwargs)
            if name is not None:
                self.owner.events.append(name)
        return func(*args, **kwargs)


class _FunctionCounter(TorchFunctionMode):
    def __init__(self, owner: HostSyncCounter):
        super().__init__()
        self.owner = owner

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        name = _HOST_READS.get(func)
        if name is None or self.owner.paused:
            return func(*args, **kwargs)
        self.owner.events.append(name)
        self.owner.paused = True  # its own aten call (_local_scalar_dense) is the same sync
        try:
            return func(*args, **kwargs)
        finally:
            self.owner.paused = False


class HostSyncCounter:
    """Context manager: `events` lists every host sync issued inside it, in order (op names)."""

    def __init__(self):
        self.events: list[str] = []
        self.paused = False
        self._modes = (_FunctionCounter(self), _DispatchCounter(self))

    def counts(self) -> Counter:
        return Counter(self.events)

    def __enter__(self) -> HostSyncCounter:
        for mode in self._modes:
            mode.__enter__()
        return self

    def __exit__(self, *exc) -> None:
        for mode in reversed(self._modes):
            mode.__exit__(*exc)
