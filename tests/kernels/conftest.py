"""Kernel tests.

triton_kernels/ runs the Triton kernels against their torch references. Without a GPU they can
only run under the Triton interpreter, which must be switched on (TRITON_INTERPRET=1) before
triton is first imported, and in a full-suite run other tests import triton long before this
directory is reached. So in such a process that directory is not collected here;
test_triton_interpreted.py runs it in a fresh interpreter-mode subprocess instead. On a CUDA
machine, or when the whole run already has TRITON_INTERPRET=1, it is collected directly too.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import pytest
import torch

from kernels.paged_slots import slots_from_block_table

collect_ignore = []
if os.environ.get("TRITON_INTERPRET") != "1" and not torch.cuda.is_available():
    collect_ignore.append("triton_kernels")


@dataclass
class PagedBatch:
    key_slots: torch.Tensor  # [B, S] int32, -1 past each sequence's length
    query_seq: torch.Tensor  # [T] int32
    query_pos: torch.Tensor  # [T] int32
    num_slots: int


def random_paged_batch(
    seq_lens: list[int], query_lens: list[int], page_size: int, gen: torch.Generator, spare_pages: int = 3
) -> PagedBatch:
    """Sequences of the given lengths scattered over shuffled pages; the last query_lens[b]
    positions of sequence b are this step's query tokens (1 = decode, more = a prefill chunk)."""
    pages_per_seq = [-(-n // page_size) for n in seq_lens]
    num_pages = sum(pages_per_seq) + spare_pages
    perm = torch.randperm(num_pages, generator=gen)
    table = torch.full((len(seq_lens), max(pages_per_seq)), -1, dtype=torch.int64)
    used = 0
    for b, n in enumerate(pages_per_seq):
        table[b, :n] = perm[used : used + n]
        used += n
    key_slots = slots_from_block_table(table, torch.tensor(seq_lens), page_size, max_len=max(seq_lens))
    seq = [b for b, q in enumerate(query_lens) for _ in range(q)]
    pos = [p for n, q in zip(seq_lens, query_lens) for p in range(n - q, n)]
    return PagedBatch(
        key_slots=key_slots,
        query_seq=torch.tensor(seq, dtype=torch.int32),
        query_pos=torch.tensor(pos, dtype=torch.int32),
        num_slots=num_pages * page_size,
    )


@pytest.fixture(scope="session")
def make_paged_batch():
    """Factory fixture: random_paged_batch(seq_lens, query_lens, page_size, gen)."""
    return random_paged_batch
