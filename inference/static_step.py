"""A uniform step (every sequence feeds the same number of new tokens T) as fixed-shape device tensors.

Decode (T = 1), MTP verification (T = 1 + drafts) and MTP draft passes are uniform. Given B, T and
the block-table width W, every shape of such a step is known before any value is: the step runs
without one host sync, and the same tensors can be captured in a CUDA graph (or traced by
torch.compile) and replayed with new values (inference/engine/decode_graphs.py).

The general `ForwardBatch` path (forward_batch.py) reads max(seq_lens) and the longest query on the
host to size its metadata; here those sizes are T and S = W * page_size, fixed per step shape:

- keys: S positions per sequence, addressed through its W block-table entries; positions past
  seq_len (padding of the table, entries -1 or stale) are masked, never read as valid keys;
- S > index_topk always (the runner's smallest width ensures it), so the DSA indexer always
  selects: a sequence that sees at most index_topk keys selects all of them, which is the same
  attention as the dense form the general path uses there (another summation order);
- padding sequences (graph buckets) are ordinary rows whose block table points at a scratch page:
  they compute garbage that nobody reads, and write only into that page.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from inference.forward_batch import AttentionMetadata, live_slots
from inference.layers.indexer import TopkSelection


@dataclass
class StepInputs:
    """One uniform step; every tensor has a shape fixed by (B, T, W)."""

    input_ids: torch.Tensor  # [B*T] new tokens, sequence-major
    positions: torch.Tensor  # [B*T] absolute position of each
    seq_lens: torch.Tensor  # [B] cached + new tokens of each sequence after the step
    block_table: torch.Tensor  # [B, W] page ids (entries past a sequence's pages: anything, masked)
    # T. A Python int on purpose: a traced step specializes on it (one graph per T), while B and W
    # stay symbolic (a symbolic T = N // B made the tracer add guards that split graphs anyway).
    tokens_per_seq: int = 1
    # MTP passes: the hidden state each new token is paired with, [B*T, hidden].
    prev_hidden: torch.Tensor | None = None
    # MTP draft passes under index_share_for_mtp_iteration: the selection to attend over
    # (TopkSelection [B, 1, K] on the native path, cache slots [B, K] through the kernels).
    reuse: TopkSelection | torch.Tensor | None = None

    @property
    def num_seqs(self) -> int:
        return self.seq_lens.shape[0]

    def last_rows(self) -> torch.Tensor:
        """[B] row of each sequence's last new token."""
        t = self.tokens_per_seq
        return torch.arange(t - 1, self.input_ids.shape[0], t, device=self.input_ids.device)


def uniform_metadata(step: StepInputs, page_size: int, masks: bool = True) -> AttentionMetadata:
    """AttentionMetadata of a uniform step, from device tensors only (no host sync)."""
    device = step.input_ids.device
    b, t = step.num_seqs, step.tokens_per_seq
    n = b * t
    width = step.block_table.shape[1]
    s = width * page_size
    rows = torch.arange(n, device=device)
    seq_of_token = rows // t
    table = step.block_table
    pages = table.gather(1, (step.positions // page_size).view(b, t)).view(n)
    slot_mapping = pages * page_size + step.positions % page_size
    key_pos = torch.arange(s, device=device)
    key_slots = table.clamp_min(0).repeat_interleave(page_size, dim=1) * page_size + key_pos % page_size  # [B, S]
    key_valid = key_hidden = None
    if masks:
        visible = key_pos.view(1, 1, s) <= step.positions.view(b, t, 1)
        key_valid = visible & (key_pos.view(1, 1, s) < step.seq_lens.view(b, 1, 1))
        key_valid[..., 0] = True  # no row is empty (padding rows see key 0 only)
        key_hidden = ~key_valid
    return AttentionMetadata(
        slot_mapping, key_slots, key_valid, rows, seq_of_token, t, s, True,
        step.positions, step.seq_lens, key_hidden, key_slots.reshape(-1),
        None if masks else live_slots(key_slots, step.seq_lens),
    )  # fmt: skip
