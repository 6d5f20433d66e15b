"""Flat cache slots from a page table: slot = page * page_size + offset.

The kernels address a paged cache [num_pages, page_size, width] as rows of its flat view
[num_pages * page_size, width], so they need one slot id per key instead of a block table.
"""

from __future__ import annotations

import torch

from kernels.validate import INDEX_DTYPES, check_tensor


def slots_from_block_table(
    block_table: torch.Tensor, seq_lens: torch.Tensor, page_size: int, max_len: int | None = None
) -> torch.Tensor:
    """key_slots [B, max_len] int32: the slot of position s of sequence b, -1 at s >= seq_lens[b].

    block_table [B, max_pages] holds page ids (-1 for unused entries); max_len defaults to
    max_pages * page_size.
    """
    check_tensor("block_table", block_table, ["B", None], INDEX_DTYPES)
    check_tensor("seq_lens", seq_lens, ["B"], INDEX_DTYPES, {"B": block_table.shape[0]})
    if page_size <= 0:
        raise ValueError(f"page_size={page_size}: expected a positive integer")
    max_pages = block_table.shape[1]
    S = max_pages * page_size if max_len is None else max_len
    if S > max_pages * page_size:
        raise ValueError(f"max_len={S}: expected <= max_pages * page_size = {max_pages * page_size}")
    pos = torch.arange(S, device=block_table.device)
    pages = block_table.long()[:, pos // page_size]  # [B, S]
    slots = pages * page_size + pos % page_size
    live = (pos[None, :] < seq_lens.long()[:, None]) & (pages >= 0)
    return torch.where(live, slots, -1).to(torch.int32)
