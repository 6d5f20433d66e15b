"""Input checks shared by the kernel dispatchers: a wrong shape fails here with a message naming
the argument, what it got and what was expected, instead of deep inside a kernel."""

from __future__ import annotations

from typing import Sequence

import torch


def check_tensor(
    name: str,
    t: torch.Tensor,
    shape: Sequence[int | str | None],
    dtypes: Sequence[torch.dtype] | None = None,
    dims: dict[str, int] | None = None,
) -> dict[str, int]:
    """Check rank, sizes and dtype of ``t``.

    ``shape`` entries: an int (exact size), a str (a named size: the first tensor that uses the name
    binds it in ``dims``, later ones must agree) or None (any size). Returns ``dims``.
    """
    dims = {} if dims is None else dims
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{name}: expected a torch.Tensor, got {type(t).__name__}")
    expected = "[" + ", ".join("*" if s is None else str(s) for s in shape) + "]"
    if t.dim() != len(shape):
        raise ValueError(f"{name}: shape {list(t.shape)} has rank {t.dim()}, expected {expected}")
    for axis, (want, got) in enumerate(zip(shape, t.shape)):
        if want is None:
            continue
        if isinstance(want, str):
            bound = dims.setdefault(want, int(got))
            if bound != got:
                raise ValueError(f"{name}: dim {axis} ({want}) is {got}, expected {bound} ({want}) from an earlier argument")
        elif got != want:
            raise ValueError(f"{name}: shape {list(t.shape)}, expected {expected}")
    if dtypes is not None and t.dtype not in dtypes:
        raise ValueError(f"{name}: dtype {t.dtype}, expected one of {[str(d) for d in dtypes]}")
    return dims


def check_same_device(**tensors: torch.Tensor) -> torch.device:
    devices = {name: t.device for name, t in tensors.items()}
    first = next(iter(devices.values()))
    for name, dev in devices.items():
        if dev != first:
            raise ValueError(f"{name}: on {dev}, expected the same device as the other inputs ({first})")
    return first


def flat_rows(name: str, cache: torch.Tensor, width: int) -> torch.Tensor:
    """View a paged cache [num_pages, page_size, width] (or already flat [num_slots, width]) as
    [num_slots, width] so that slot = page * page_size + offset indexes a row."""
    if cache.dim() not in (2, 3) or cache.shape[-1] != width:
        raise ValueError(
            f"{name}: shape {list(cache.shape)}, expected [num_pages, page_size, {width}] or [num_slots, {width}]"
        )
    if cache.stride(-1) != 1 or not cache.is_contiguous():
        raise ValueError(f"{name}: must be contiguous (a paged cache tensor, not a strided view)")
    return cache.view(-1, width)


FLOAT_DTYPES = (torch.float32, torch.bfloat16, torch.float16)
INDEX_DTYPES = (torch.int32, torch.int64)
