"""Paged KV cache tensors for the MLA latent and the DSA indexer keys.

Only the tensors live here; which page belongs to which sequence is the engine's business.
Per cache layer (0..L-1 plus the MTP layer at index L):
- latent [num_pages, page_size, kv_lora_rank + qk_rope_head_dim]: kv_a_layernorm(c) then the
  rotated rope key. The rope slice is stored in transformers' order (even-pair outputs, then odd-pair
  outputs, see layers/rope.py); every consumer uses the same order, so dot products are unaffected.
- indexer [num_pages, page_size, index_head_dim]: only on full-indexer layers (and MTP), because
  IndexShare "shared" layers reuse the top-k of an earlier layer and never read keys of their own.

kv_cache_dtype="fp8" stores both as uint8 bytes in the serving engines' FP8 layouts instead
(kv_formats.py): latent [num_pages, page_size, 656 B at GLM-5 widths], indexer [num_pages,
page_size * 132 B]. Layers read and write through `latent_rows` / `indexer_rows`; everything that
moves whole pages (read/write/copy_pages, the host tier) copies the raw bytes of either format.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from inference.config import ModelConfig
from inference.kv_formats import (
    DenseRows, Fp8IndexerRows, Fp8LatentRows, hadamard, indexer_key_bytes, latent_row_bytes,
)

KV_CACHE_DTYPES = ("auto", "fp8")


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


def check_kv_cache_dtype(kv_cache_dtype: str) -> str:
    if kv_cache_dtype not in KV_CACHE_DTYPES:
        raise ValueError(f"kv_cache_dtype={kv_cache_dtype!r}: expected one of {KV_CACHE_DTYPES} "
                         f"('auto' = the model dtype)")
    return kv_cache_dtype


def kv_bytes_per_token(config: ModelConfig, dtype: torch.dtype = torch.bfloat16, kv_cache_dtype: str = "auto") -> int:
    """Cache bytes one token occupies across all layers (MLA latent everywhere, indexer on full
    layers, the MTP layer included); `dtype` is the model dtype."""
    n_latent, n_indexer = config.num_cache_layers, len(config.indexer_layers)
    if check_kv_cache_dtype(kv_cache_dtype) == "fp8":
        latent = latent_row_bytes(config.kv_lora_rank, config.qk_rope_head_dim, dtype)
        return latent * n_latent + indexer_key_bytes(config.index_head_dim) * n_indexer
    return (config.latent_dim * n_latent + config.index_head_dim * n_indexer) * dtype.itemsize


class PagedKVCache:
    def __init__(
        self,
        config: ModelConfig,
        num_pages: int,
        page_size: int,
        dtype: torch.dtype = torch.bfloat16,
        device: torch.device | str = "cpu",
        kv_cache_dtype: str = "auto",
        power_of_two_scales: bool = False,
    ):
        """dtype: the model dtype (what layers write and read back); kv_cache_dtype: "auto" stores
        that dtype, "fp8" the FP8 layouts; power_of_two_scales rounds FP8 scales up ("ue8m0")."""
        if num_pages <= 0 or page_size <= 0:
            raise ValueError(f"num_pages={num_pages}, page_size={page_size}: expected positive integers")
        self.config = config
        self.num_pages = num_pages
        self.page_size = page_size
        self.dtype = dtype
        self.device = torch.device(device)
        self.kv_cache_dtype = check_kv_cache_dtype(kv_cache_dtype)
        self.power_of_two_scales = power_of_two_scales
        fp8 = kv_cache_dtype == "fp8"
        if fp8 and (page_size * config.index_head_dim) % 4:
            raise ValueError(f"kv_cache_dtype='fp8': page_size * index_head_dim = {page_size} * "
                             f"{config.index_head_dim} must be a multiple of 4 (the fp32 scales follow the values)")
        self.storage_dtype = torch.uint8 if fp8 else dtype
        latent_width = latent_row_bytes(config.kv_lora_rank, config.qk_rope_head_dim, dtype) if fp8 else config.latent_dim
        indexer_shape = (page_size * indexer_key_bytes(config.index_head_dim),) if fp8 else (page_size, config.index_head_dim)
        self.latent = [
            torch.zeros(num_pages, page_size, latent_width, dtype=self.storage_dtype, device=device)
            for _ in range(config.num_cache_layers)
        ]
        self.indexer = {
            layer: torch.zeros(num_pages, *indexer_shape, dtype=self.storage_dtype, device=device)
            for layer in config.indexer_layers
        }
        # Looked up once: rows are built per layer per step (and a compiled step would trace the lookup).
        self._rotation = hadamard(config.index_head_dim, self.device) if fp8 else None

    @property
    def num_layers(self) -> int:
        return len(self.latent)

    def bytes_per_token(self) -> int:
        return kv_bytes_per_token(self.config, self.dtype, self.kv_cache_dtype)

    def latent_rows(self, layer: int):
        """The layer's MLA rows (write by slot, gather by slot in the model dtype)."""
        if self.kv_cache_dtype == "fp8":
            cfg = self.config
            return Fp8LatentRows(self.latent[layer], cfg.kv_lora_rank, cfg.qk_rope_head_dim, self.dtype,
                                 self.power_of_two_scales)
        return DenseRows(self.latent_flat(layer))

    def indexer_rows(self, layer: int):
        if layer not in self.indexer:
            raise KeyError(f"layer {layer} is an IndexShare 'shared' layer and has no indexer cache")
        if self.kv_cache_dtype == "fp8":
            return Fp8IndexerRows(self.indexer[layer], self.page_size, self.config.index_head_dim, self.dtype,
                                  self.power_of_two_scales, self._rotation)
        return DenseRows(self.indexer_flat(layer))

    def latent_flat(self, layer: int) -> torch.Tensor:
        """[num_pages * page_size, latent_dim] view addressed by slot (model-dtype cache only)."""
        self._need_dense("latent_flat")
        return self.latent[layer].view(-1, self.config.latent_dim)

    def indexer_flat(self, layer: int) -> torch.Tensor:
        self._need_dense("indexer_flat")
        if layer not in self.indexer:
            raise KeyError(f"layer {layer} is an IndexShare 'shared' layer and has no indexer cache")
        return self.indexer[layer].view(-1, self.config.index_head_dim)

    def _need_dense(self, what: str) -> None:
        if self.kv_cache_dtype != "auto":
            raise TypeError(f"{what}: the {self.kv_cache_dtype} cache holds bytes; use latent_rows/indexer_rows")

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
        got = [tuple(t.shape[1:]) for t in [*data.latent[:1], *list(data.indexer.values())[:1]]]
        want = [tuple(t.shape[1:]) for t in [*self.latent[:1], *list(self.indexer.values())[:1]]]
        if got != want:
            raise ValueError(f"write_pages: page shapes {got} != this cache's {want} "
                             f"(kv_cache_dtype={self.kv_cache_dtype!r}: pages move between caches of one format)")
        if set(data.indexer) != set(self.indexer):
            raise ValueError(f"write_pages: indexer layers {sorted(data.indexer)} != {sorted(self.indexer)}")
        for dst, src in zip(self.latent, data.latent):
            dst.index_copy_(0, pages, src.to(device=self.device, dtype=self.storage_dtype))
        for k, dst in self.indexer.items():
            dst.index_copy_(0, pages, data.indexer[k].to(device=self.device, dtype=self.storage_dtype))

    def copy_pages(self, src: torch.Tensor, dst: torch.Tensor) -> None:
        src = self._check_pages(src, "src")
        dst = self._check_pages(dst, "dst")
        if src.numel() != dst.numel():
            raise ValueError(f"copy_pages: {src.numel()} source pages but {dst.numel()} destination pages")
        for t in [*self.latent, *self.indexer.values()]:
            t.index_copy_(0, dst, t.index_select(0, src))
