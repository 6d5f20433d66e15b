"""Host-memory tier: where evicted device pages go instead of being dropped.

On a CPU-only machine both pools are CPU tensors and the copies run inline. On CUDA the host pool
is pinned memory and the copies are non_blocking on a side stream, so spilling and restoring
overlap with compute; `fence()` makes the compute stream wait for them. Without KV pools (the
cost-model replay) only the accounting runs.

NOTE (CUDA ordering): every copy is enqueued on the side stream after it waits for the compute
stream, so it reads what earlier forwards wrote and overwrites nothing they still read. Copies
never wait for each other across streams: spills and restores share the one side stream, in
issue order. Before anything on the compute stream touches a page that a copy wrote (a restored
page) or that a copy may still read (a spilled page, freed and handed out again), it must call
`fence()`; the model runner does so before every forward, the engine before every page copy.
"""

from __future__ import annotations

from typing import Any, Iterator, Optional

import torch

from inference.engine.page_allocator import PageAllocator


class HostTier:
    def __init__(self, num_pages: int, device_cache: Optional[Any] = None, host_cache: Optional[Any] = None):
        self.allocator = PageAllocator(num_pages)
        self.device_cache = device_cache
        self.host_cache = host_cache
        self.pages_spilled = 0
        self.pages_restored = 0
        self.pages_dropped = 0  # cached host pages given up for room (or replaced by a device copy)
        device = getattr(device_cache, "device", None)
        self._cuda = device is not None and device.type == "cuda" and host_cache is not None
        self._stream = torch.cuda.Stream(device=device) if self._cuda else None
        self._copies_done: Optional[torch.cuda.Event] = None  # after the last copy issued
        # Runs each copy: `copy` here; the engine routes it through its model runner so that
        # tensor-parallel followers mirror every copy into their own host pages.
        self.copier = self.copy

    @property
    def enabled(self) -> bool:
        return self.allocator.num_pages > 0

    @property
    def num_free(self) -> int:
        return self.allocator.num_free

    def spill(self, device_pages: list[int]) -> list[int]:
        """Copy device pages out; the caller then frees the device pages."""
        host_pages = self.allocator.alloc(len(device_pages))
        self.copier("spill", device_pages, host_pages)
        self.pages_spilled += len(device_pages)
        return host_pages

    def load(self, host_pages: list[int], device_pages: list[int]) -> None:
        """Copy host pages into device pages; the host copy stays."""
        self.copier("load", host_pages, device_pages)
        self.pages_restored += len(host_pages)

    def restore(self, host_pages: list[int], device_pages: list[int]) -> None:
        """Copy host pages back into freshly allocated device pages and release the host copy
        (on CUDA the side stream may still be reading it: whoever reuses the host page next is
        a copy on that same stream, so it comes after)."""
        self.load(host_pages, device_pages)
        self.allocator.free(host_pages)

    def drop(self, host_pages: list[int]) -> None:
        self.allocator.free(host_pages)
        self.pages_dropped += len(host_pages)

    def fence(self) -> None:
        """Make the compute stream wait for every copy issued so far (a no-op on CPU)."""
        if self._copies_done is not None:
            torch.cuda.current_stream(self._stream.device).wait_event(self._copies_done)
            self._copies_done = None

    def copy(self, direction: str, src_pages: list[int], dst_pages: list[int]) -> None:
        """The copy itself: "spill" device -> host pages, "load" host -> device pages."""
        if direction == "spill":
            self._copy(self.device_cache, src_pages, self.host_cache, dst_pages)
        elif direction == "load":
            self._copy(self.host_cache, src_pages, self.device_cache, dst_pages)
        else:
            raise ValueError(f"host copy direction {direction!r}: expected 'spill' or 'load'")

    def _copy(self, src, src_pages: list[int], dst, dst_pages: list[int]) -> None:
        if src is None or dst is None or not src_pages:
            return
        if not self._cuda:
            copy_pages(src, src_pages, dst, dst_pages, non_blocking=False)
            return
        self._stream.wait_stream(torch.cuda.current_stream(self._stream.device))
        with torch.cuda.stream(self._stream):
            copy_pages(src, src_pages, dst, dst_pages, non_blocking=True)
        self._copies_done = torch.cuda.Event()
        self._copies_done.record(self._stream)


def copy_pages(src, src_pages: list[int], dst, dst_pages: list[int], non_blocking: bool) -> None:
    """Copy pages between two `PagedKVCache`s of the same layout, every cache layer and indexer,
    one slice copy per run of consecutive ids on both sides. Slices of a pinned host tensor are
    pinned too, so on CUDA each run is one asynchronous DMA with no staging buffer."""
    for s, d, n in page_runs(src_pages, dst_pages):
        for a, b in zip(src.latent, dst.latent):
            b[d:d + n].copy_(a[s:s + n], non_blocking=non_blocking)
        for layer, a in src.indexer.items():
            dst.indexer[layer][d:d + n].copy_(a[s:s + n], non_blocking=non_blocking)


def page_runs(src: list[int], dst: list[int]) -> Iterator[tuple[int, int, int]]:
    """(src start, dst start, length) of the maximal runs where both id lists count up by one."""
    if len(src) != len(dst):
        raise ValueError(f"copy of {len(src)} pages into {len(dst)} pages")
    i = 0
    while i < len(src):
        n = 1
        while i + n < len(src) and src[i + n] == src[i] + n and dst[i + n] == dst[i] + n:
            n += 1
        yield src[i], dst[i], n
        i += n
