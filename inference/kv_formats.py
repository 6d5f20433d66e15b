"""How one cache layer stores its rows: in the model dtype, or as FP8 bytes in the serving layouts.

The model only ever sees a `RowStore`: `write(slots, rows)` on the step's new tokens (slot_mapping)
and `gather(slots)` of the keys it reads, in the model dtype. Only the gathered rows are
dequantized, never the whole cache. The raw tensors stay in `PagedKVCache` with the page as their
first dimension, so page copies, the host tier and preemption move bytes without knowing the format.

FP8 layouts (docs/glm5-model.md §D, vLLM `fp8_ds_mla` and `DeepseekV32IndexerCache`):
- MLA latent, one row per token: kv_lora_rank e4m3 bytes | one fp32 scale per 128 latent values |
  the rope key unquantized in the model dtype. With a bf16 model (the real checkpoints) that is
  512 + 16 + 128 = 656 B; an fp32 test model keeps fp32 rope, so rope is bit-exact in any dtype.
- Indexer key, per page of N tokens: N x index_head_dim e4m3 bytes (token-major), then N fp32
  scales (one per 128 values): 132 B per token at GLM-5 widths.
Scale = max(amax, 1e-4) / 448 per 128-value block (a shorter last block for tiny test widths),
optionally rounded up to a power of two ("ue8m0", DeepSeek's `scale_fmt`).

Hadamard: the indexer keys are rotated by a normalized 128-point Hadamard matrix before they are
quantized, and the queries by the same matrix before scoring. The rotation is orthogonal, so the
scores are unchanged in exact arithmetic, but it spreads a few outlier channels over the whole
block: the per-block scale then follows the typical magnitude instead of the outlier, and the e4m3
rounding error that can flip near-tied top-k choices shrinks (DeepSeek's reference and SGLang do
this; vLLM dropped it, reporting no accuracy effect). It costs one [D, D] matmul per written key
and per query head, which is small next to scoring every cached key. The MLA latent is not rotated
(fp8_ds_mla is not), and a model-dtype cache needs no rotation at all.
"""

from __future__ import annotations

import functools

import torch

FP8_DTYPE = torch.float8_e4m3fn
FP8_MAX = 448.0
SCALE_BLOCK = 128  # values per fp32 scale
MIN_AMAX = 1e-4  # an all-zero block still gets a positive scale
SCALE_BYTES = 4


def num_scale_blocks(width: int) -> int:
    return -(-width // SCALE_BLOCK)


def latent_row_bytes(kv_lora_rank: int, rope_dim: int, dtype: torch.dtype) -> int:
    """Bytes of one fp8_ds_mla row: e4m3 latent, fp32 scales, rope in the model dtype."""
    return kv_lora_rank + SCALE_BYTES * num_scale_blocks(kv_lora_rank) + rope_dim * dtype.itemsize


def indexer_key_bytes(index_head_dim: int) -> int:
    """Bytes one token's FP8 indexer key takes in its page: e4m3 values plus fp32 scales."""
    return index_head_dim + SCALE_BYTES * num_scale_blocks(index_head_dim)


def quantize_blocks(x: torch.Tensor, power_of_two: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """x [n, W] -> (e4m3 values as uint8 [n, W], fp32 scales [n, ceil(W/128)])."""
    n, width = x.shape
    blocks = num_scale_blocks(width)
    padded = torch.nn.functional.pad(x.float(), (0, blocks * SCALE_BLOCK - width))
    padded = padded.view(n, blocks, SCALE_BLOCK)
    scales = padded.abs().amax(dim=-1).clamp_min(MIN_AMAX) / FP8_MAX
    if power_of_two:
        scales = torch.exp2(torch.ceil(torch.log2(scales)))
    values = (padded / scales.unsqueeze(-1)).clamp_(-FP8_MAX, FP8_MAX).to(FP8_DTYPE)
    return values.view(n, -1)[:, :width].view(torch.uint8), scales


# Every e4m3 byte as fp32. On CPU torch converts e4m3 element by element (~25x slower than this
# 256-entry lookup, measured); on CUDA the cast is the fast path.
_E4M3_TO_FP32 = torch.arange(256, dtype=torch.uint8).view(FP8_DTYPE).float()


def fp8_to_float(values: torch.Tensor) -> torch.Tensor:
    """uint8 e4m3 bytes -> fp32 values (exact either way)."""
    if values.device.type == "cpu":
        return _E4M3_TO_FP32.index_select(0, values.reshape(-1).int()).view(values.shape)
    return values.view(FP8_DTYPE).float()


def dequantize_blocks(
    values: torch.Tensor, scales: torch.Tensor, dtype: torch.dtype, out: torch.Tensor | None = None
) -> torch.Tensor:
    """Inverse of quantize_blocks: uint8 [n, W], fp32 [n, blocks] -> [n, W] in dtype (into `out`
    when given). The hot read path of every FP8 layer: broadcast the scales, no repeat."""
    n, width = values.shape
    blocks = scales.shape[-1]
    full = fp8_to_float(values)
    if blocks == 1:
        full.mul_(scales)
    elif width == blocks * SCALE_BLOCK:
        full.view(n, blocks, SCALE_BLOCK).mul_(scales.unsqueeze(-1))
    else:
        full.mul_(scales.repeat_interleave(SCALE_BLOCK, dim=-1)[:, :width])
    if out is None:
        return full.to(dtype)
    out.copy_(full)
    return out


@functools.lru_cache(maxsize=8)
def hadamard(dim: int, device: torch.device) -> torch.Tensor | None:
    """The normalized [dim, dim] Hadamard matrix (symmetric, orthogonal), None when dim is not a
    power of two (then keys are quantized unrotated). Cached: every layer asks for it every step."""
    if dim < 2 or dim & (dim - 1):
        return None
    h = torch.ones(1, 1)
    while h.shape[0] < dim:  # Sylvester: [[H, H], [H, -H]]
        h = torch.cat([torch.cat([h, h], 1), torch.cat([h, -h], 1)], 0)
    return (h * dim**-0.5).to(device)


class DenseRows:
    """Rows kept in the model dtype: [slots, D] addressed by slot (the default cache)."""

    def __init__(self, table: torch.Tensor):
        self.table = table
        self.dtype = table.dtype

    def write(self, slots: torch.Tensor, rows: torch.Tensor) -> None:
        # index_copy_: one op on the per-layer decode path (indexed assignment dispatches three).
        self.table.index_copy_(0, slots, rows if rows.dtype == self.table.dtype else rows.to(self.table.dtype))

    def gather(self, slots: torch.Tensor) -> torch.Tensor:
        return self.table.index_select(0, slots)

    def dense(self) -> torch.Tensor | None:
        """The table itself, for kernels that read the cache in place."""
        return self.table

    def prepare_query(self, q: torch.Tensor) -> torch.Tensor:
        return q


class Fp8LatentRows:
    """fp8_ds_mla rows: storage [num_pages, page_size, latent_row_bytes] uint8."""

    def __init__(self, storage: torch.Tensor, rank: int, rope: int, dtype: torch.dtype, power_of_two: bool = False):
        self.flat = storage.view(-1, storage.shape[-1])
        self.rank, self.rope, self.dtype, self.power_of_two = rank, rope, dtype, power_of_two
        self.scale_end = rank + SCALE_BYTES * num_scale_blocks(rank)

    def write(self, slots: torch.Tensor, rows: torch.Tensor) -> None:
        values, scales = quantize_blocks(rows[:, : self.rank], self.power_of_two)
        rope = rows[:, self.rank :].to(self.dtype).contiguous()
        packed = torch.cat([values, scales.view(torch.uint8), rope.view(torch.uint8)], dim=-1)
        self.flat.index_copy_(0, slots.long(), packed)

    def gather(self, slots: torch.Tensor) -> torch.Tensor:
        raw = self.flat.index_select(0, slots)  # [n, row bytes], contiguous
        scales = raw[:, self.rank : self.scale_end].contiguous().view(torch.float32)
        out = torch.empty(raw.shape[0], self.rank + self.rope, dtype=self.dtype, device=raw.device)
        out[:, self.rank :] = raw[:, self.scale_end :].contiguous().view(self.dtype)
        dequantize_blocks(raw[:, : self.rank], scales, self.dtype, out=out[:, : self.rank])
        return out

    def dense(self) -> torch.Tensor | None:
        return None

    def prepare_query(self, q: torch.Tensor) -> torch.Tensor:
        return q


class Fp8IndexerRows:
    """FP8 indexer keys in vLLM's page layout: storage [num_pages, page_size * indexer_key_bytes]
    uint8, each page holding its tokens' values first and then their scales."""

    def __init__(self, storage: torch.Tensor, page_size: int, dim: int, dtype: torch.dtype, power_of_two: bool = False,
                 rotation: torch.Tensor | None | str = "hadamard"):
        """rotation: "hadamard" looks it up; a cache that builds these rows every step passes the
        matrix (or None where dim is not a power of two) it looked up once."""
        num_pages, page_bytes = storage.shape
        self.storage = storage  # the raw pages, for kernels that read the layout in place
        self.page_size, self.dim, self.dtype, self.power_of_two = page_size, dim, dtype, power_of_two
        blocks = num_scale_blocks(dim)
        self.values = storage[:, : page_size * dim].view(num_pages, page_size, dim)
        self.scales = storage[:, page_size * dim :].view(torch.float32).view(num_pages, page_size, blocks)
        self.rotation = hadamard(dim, storage.device) if isinstance(rotation, str) else rotation
        # When a page is a whole number of dim-byte rows (page_size a multiple of 32 at dim 128, as
        # the serving engines' 64), token (page, offset) is row page * rows_per_page + offset of
        # one flat [*, dim] view and its scales row page * scale_rows + page_size * dim / 4 /
        # blocks + offset of a flat [*, blocks] fp32 view: index_select instead of 2-D indexing.
        words = page_bytes // SCALE_BYTES
        self.flat_ok = page_bytes % dim == 0 and words % blocks == 0 and (page_size * dim // SCALE_BYTES) % blocks == 0
        if self.flat_ok:
            self.rows_per_page = page_bytes // dim
            self.scale_rows, self.scale_start = words // blocks, page_size * dim // SCALE_BYTES // blocks
            self.flat_values = storage.view(-1, dim)
            self.flat_scales = storage.view(-1).view(torch.float32).view(-1, blocks)

    def _where(self, slots: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        slots = slots.long()
        return slots // self.page_size, slots % self.page_size

    def write(self, slots: torch.Tensor, rows: torch.Tensor) -> None:
        rows = rows.float()
        if self.rotation is not None:
            rows = rows @ self.rotation
        values, scales = quantize_blocks(rows, self.power_of_two)
        page, offset = self._where(slots)
        self.values[page, offset] = values
        self.scales[page, offset] = scales

    def gather(self, slots: torch.Tensor) -> torch.Tensor:
        """Keys in the rotated basis: score them against `prepare_query(q)`."""
        page, offset = self._where(slots)
        if self.flat_ok:
            values = self.flat_values.index_select(0, page * self.rows_per_page + offset)
            scales = self.flat_scales.index_select(0, page * self.scale_rows + self.scale_start + offset)
        else:
            values, scales = self.values[page, offset], self.scales[page, offset]
        return dequantize_blocks(values, scales, self.dtype)

    def dense(self) -> torch.Tensor | None:
        return None

    def prepare_query(self, q: torch.Tensor) -> torch.Tensor:
        """q [..., dim] into the keys' rotated basis (q . k is unchanged: H is orthogonal)."""
        if self.rotation is None:
            return q
        return (q.float() @ self.rotation).to(q.dtype)
