"""Host-memory tier: where evicted device pages go instead of being dropped.

On a GPU the host pool is pinned CPU memory; on a CPU-only machine both pools are CPU tensors,
but the copies and the accounting are the same. Without KV pools (the cost-model replay) only
the accounting runs.
"""

from __future__ import annotations

from typing import Any, Optional

import torch

from inference.engine.page_allocator import PageAllocator


class HostTier:
    def __init__(self, num_pages: int, device_cache: Optional[Any] = None, host_cache: Optional[Any] = None):
        self.allocator = PageAllocator(num_pages)
        self.device_cache = device_cache
        self.host_cache = host_cache
        self.pages_spilled = 0
        self.pages_restored = 0

    @property
    def enabled(self) -> bool:
        return self.allocator.num_pages > 0

    @property
    def num_free(self) -> int:
        return self.allocator.num_free

    def spill(self, device_pages: list[int]) -> list[int]:
        """Copy device pages out; the caller then frees the device pages."""
        host_pages = self.allocator.alloc(len(device_pages))
        if self.host_cache is not None:
            self.host_cache.write_pages(_ids(host_pages), self.device_cache.read_pages(_ids(device_pages)))
        self.pages_spilled += len(device_pages)
        return host_pages

    def restore(self, host_pages: list[int], device_pages: list[int]) -> None:
        """Copy host pages back into freshly allocated device pages and release the host copy."""
        if self.device_cache is not None:
            self.device_cache.write_pages(_ids(device_pages), self.host_cache.read_pages(_ids(host_pages)))
        self.allocator.free(host_pages)
        self.pages_restored += len(host_pages)

    def drop(self, host_pages: list[int]) -> None:
        self.allocator.free(host_pages)


def _ids(pages: list[int]) -> torch.Tensor:
    return torch.tensor(pages, dtype=torch.long)
