"""Free-list allocator for fixed-size KV pages (one per tier)."""

from __future__ import annotations


class OutOfPages(RuntimeError):
    pass


class PageAllocator:
    """Hands out page ids in [0, num_pages). Pages are owned by exactly one holder at a time:
    a running sequence's private tail or a radix-cache node; the holder frees them."""

    def __init__(self, num_pages: int):
        if num_pages < 0:
            raise ValueError(f"num_pages must be >= 0, got {num_pages}")
        self.num_pages = num_pages
        # Popped from the end, so low page ids are used first (easier to read in dumps).
        self._free = list(range(num_pages - 1, -1, -1))
        self._used = bytearray(num_pages)

    @property
    def num_free(self) -> int:
        return len(self._free)

    def alloc(self, n: int) -> list[int]:
        if n > len(self._free):
            raise OutOfPages(f"asked for {n} pages, {len(self._free)} free")
        if n == 0:
            return []
        pages = self._free[-n:][::-1]
        del self._free[-n:]
        for p in pages:
            self._used[p] = 1
        return pages

    def free(self, pages: list[int]) -> None:
        for p in pages:
            if not self._used[p]:
                raise RuntimeError(f"page {p} freed twice")
            self._used[p] = 0
        self._free.extend(reversed(pages))
