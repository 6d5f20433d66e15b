"""Paged KV cache tensors for the MLA latent and the DSA indexer keys.

Only the tensors live here; which page belongs to which sequence is the engine's business.
Per cache layer (0..L-1 plus the MTP layer at index L):
- latent [num_pages, page_size, kv_lora_rank + qk_rope_head_dim]: kv_a_layernorm(c) then the
  rotated rope key. The rope slice is stored in transformers' order (even-pair outputs, then odd-pair
  outputs, see layers/rope.py); every consumer uses the same order, so dot products are unaffected.
- indexer [num_pages, page_size, index_head_dim]: only on full-indexer layers (and MTP), because
  IndexShare "shared" layers reuse the top-k of an earlier layer and never read keys of their own.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from inference.config import ModelConfig


@dataclass
class PageData:
    """A host-side copy of some pages of every layer (for offloading to a slower tier)."""

    latent: list[torch.Tensor]  # per cache layer: [n, page_size, latent_dim]
    indexer: dict[int, torch.Tensor]  # per full-indexer layer: [n, page_size, index_head_dim]

    @property
    def num_pages(self) -> int:
        return int(self.latent[0].shape[0]) if self.latent else 0

    @property
    def nbytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in [*self.latent, *self.indexer.values()])

    def to(self, device: torch.device | str, non_blocking: bool = False) -> PageData:
        return PageData(
            [t.to(device, non_blocking=non_blocking) for t in self.latent],
            {k: t.to(device, non_blocking=non_blocking) for k, t in self.indexer.items()},
        )


def kv_bytes_per_token(config: ModelConfig, dtype: torch.dtype = torch.bfloat16) -> int:
    """Cache bytes one token occupies across all layers (MLA latent everywhere, indexer on full layers)."""
    item = torch.tensor([], dtype=dtype).element_size()
    width = config.latent_dim * config.num_cache_layers + config.index_head_dim * len(config.indexer_layers)
    return width * item


class PagedKVCache:
    def __init__(
        self,
        config: ModelConfig,
        num_pages: int,
        page_size: int,
        dtype: torch.dtype = torch.bfloat16,
        device: torch.device | str = "cpu",
    ):
        if num_pages <= 0 or page_size <= 0:
            raise ValueError(f"num_pages={num_pages}, page_size={page_size}: expected positive integers")
        self.config = config
        self.num_pages = num_pages
        self.page_size = page_size
        self.dtype = dtype
        self.device = torch.device(device)
        shape = (num_pages, page_size)
        self.latent = [
            torch.zeros(*shape, config.latent_dim, dtype=dtype, device=device)
            for _ in range(config.num_cache_layers)
        ]
        self.indexer = {
            layer: torch.zeros(*shape, config.index_head_dim, dtype=dtype, device=device)
            for layer in config.indexer_layers
        }

    @property
    def num_layers(self) -> int:
        return len(self.latent)

    def bytes_per_token(self) -> int:
        return kv_bytes_per_token(self.config, self.dtype)

    def latent_flat(self, layer: int) -> torch.Tensor:
        """[num_pages * page_size, latent_dim] view addressed by slot."""
        return self.latent[layer].view(-1, self.config.latent_dim)

    def indexer_flat(self, layer: int) -> torch.Tensor:
        if layer not in self.indexer:
            raise KeyError(f"layer {layer} is an IndexShare 'shared' layer and has no indexer cache")
        return self.indexer[layer].view(-1, self.config.index_head_dim)

    def _check_pages(self, pages: torch.Tensor, name: str) -> torch.Tensor:
        pages = pages.to(device=self.device, dtype=torch.long).flatten()
        if pages.numel() and (int(pages.min()) < 0 or int(pages.max()) >= self.num_pages):
            raise ValueError(f"{name}: page ids must lie in [0, {self.num_pages}), got {pages.tolist()}")
        return pages

    def read_pages(self, pages: torch.Tensor) -> PageData:
        pages = self._check_pages(pages, "pages")
        return PageData(
            [t.index_select(0, pages) for t in self.latent],
            {k: t.index_select(0, pages) for k, t in self.indexer.items()},
        )

    def write_pages(self, pages: torch.Tensor, data: PageData) -> None:
        pages = self._check_pages(pages, "pages")
        if data.num_pages != pages.numel() or len(data.latent) != len(self.latent):
            raise ValueError(
                f"write_pages: data holds {data.num_pages} pages x {len(data.latent)} layers, "
                f"expected {pages.numel()} pages x {len(self.latent)} layers"
            )
        if set(data.indexer) != set(self.indexer):
            raise ValueError(f"write_pages: indexer layers {sorted(data.indexer)} != {sorted(self.indexer)}")
        for dst, src in zip(self.latent, data.latent):
            dst.index_copy_(0, pages, src.to(device=self.device, dtype=self.dtype))
        for k, dst in self.indexer.items():
            dst.index_copy_(0, pages, data.indexer[k].to(device=self.device, dtype=self.dtype))

    def copy_pages(self, src: torch.Tensor, dst: torch.Tensor) -> None:
        src = self._check_pages(src, "src")
        dst = self._check_pages(dst, "dst")
        if src.numel() != dst.numel():
            raise ValueError(f"copy_pages: {src.numel()} source pages but {dst.numel()} destination pages")
        for t in [*self.latent, *self.indexer.values()]:
            t.index_copy_(0, dst, t.index_select(0, src))
