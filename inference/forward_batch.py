"""The model's step input: a flat batch of new tokens from many sequences, plus paging metadata.

The engine fills a `ForwardBatch`; the model turns it once per step into `AttentionMetadata`
(slot of every new token, per-sequence key slots, the padded query layout) that every layer shares.

Slot of the token at position p of sequence b = block_table[b, p // page_size] * page_size + p % page_size.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass
class ForwardBatch:
    """A flat batch of NEW tokens from many sequences (prefill chunks and decode tokens mixed)."""

    input_ids: torch.LongTensor  # [N] new tokens of all sequences, concatenated in sequence order
    positions: torch.LongTensor  # [N] absolute position of each new token in its sequence
    query_start_loc: torch.LongTensor  # [B+1] cumulative offsets of each sequence's new tokens in input_ids
    seq_lens: torch.LongTensor  # [B] tokens in the cache for each sequence AFTER this step (cached + new)
    block_table: torch.LongTensor  # [B, max_pages] page ids of each sequence in order, padded with -1
    logits_indices: torch.LongTensor  # [M] rows of N for which hidden states/logits are returned

    @property
    def num_tokens(self) -> int:
        return int(self.input_ids.shape[0])

    @property
    def num_seqs(self) -> int:
        return int(self.seq_lens.shape[0])

    def validate(self, page_size: int) -> None:
        """Cheap consistency checks; raises ValueError naming the field."""
        n, b = self.num_tokens, self.num_seqs
        if self.positions.shape != (n,):
            raise ValueError(f"positions: shape {tuple(self.positions.shape)}, expected ({n},)")
        if self.query_start_loc.shape != (b + 1,):
            raise ValueError(f"query_start_loc: shape {tuple(self.query_start_loc.shape)}, expected ({b + 1},)")
        if int(self.query_start_loc[0]) != 0 or int(self.query_start_loc[-1]) != n:
            raise ValueError(f"query_start_loc must start at 0 and end at num_tokens={n}")
        if self.block_table.dim() != 2 or self.block_table.shape[0] != b:
            raise ValueError(f"block_table: shape {tuple(self.block_table.shape)}, expected ({b}, max_pages)")
        need = (int(self.seq_lens.max()) + page_size - 1) // page_size if b else 0
        if self.block_table.shape[1] < need:
            raise ValueError(f"block_table: {self.block_table.shape[1]} columns, seq_lens need {need} pages")

    @classmethod
    def build(
        cls,
        new_tokens: list[list[int]],
        cached_lens: list[int],
        block_table: list[list[int]],
        logits: str = "last",
        device: torch.device | str = "cpu",
    ) -> ForwardBatch:
        """Convenience constructor from Python lists (tests, simple drivers).

        logits="last" returns each sequence's last new token, "all" every new token.
        """
        if not (len(new_tokens) == len(cached_lens) == len(block_table)):
            raise ValueError("new_tokens, cached_lens and block_table must have one entry per sequence")
        lens = [len(t) for t in new_tokens]
        if any(n == 0 for n in lens):
            raise ValueError("every sequence in a ForwardBatch needs at least one new token")
        ids = [tok for seq in new_tokens for tok in seq]
        positions = [c + i for c, n in zip(cached_lens, lens) for i in range(n)]
        starts = [0]
        for n in lens:
            starts.append(starts[-1] + n)
        width = max((len(p) for p in block_table), default=0)
        table = [list(p) + [-1] * (width - len(p)) for p in block_table]
        if logits == "last":
            rows = [s - 1 for s in starts[1:]]
        elif logits == "all":
            rows = list(range(len(ids)))
        else:
            raise ValueError(f"logits={logits!r}: expected 'last' or 'all'")

        def t(x):
            return torch.tensor(x, dtype=torch.long, device=device)

        return cls(
            input_ids=t(ids),
            positions=t(positions),
            query_start_loc=t(starts),
            seq_lens=t([c + n for c, n in zip(cached_lens, lens)]),
            block_table=t(table).view(len(block_table), width),
            logits_indices=t(rows),
        )


def live_slots(key_slots: torch.Tensor, seq_lens: torch.Tensor) -> torch.Tensor:
    """[B, S] int32 key slots, -1 at positions past each sequence's length."""
    live = torch.arange(key_slots.shape[1], device=key_slots.device).unsqueeze(0) < seq_lens.unsqueeze(1)
    return torch.where(live, key_slots, -1).to(torch.int32)


@dataclass
class AttentionMetadata:
    """Per-step indexing shared by all layers (built once from a ForwardBatch)."""

    slot_mapping: torch.Tensor  # [N] flat cache slot of every new token
    key_slots: torch.Tensor  # [B, S] flat cache slot of each visible key (0 for padding)
    key_valid: torch.Tensor | None  # [B, T, S] bool: key s is causally visible to query row t
    query_rows: torch.Tensor  # [N] row of each new token in the padded [B*T] query layout
    seq_of_token: torch.Tensor  # [N] sequence index of each new token
    max_query_len: int  # T
    max_seq_len: int  # S
    uniform: bool  # every sequence has exactly T new tokens: padded layout == flat layout, no copies
    positions: torch.Tensor  # [N] (from the batch)
    seq_lens: torch.Tensor  # [B] (from the batch)
    # NOTE: plain fields built once per step (not cached properties: torch.compile cannot trace
    # functools.cached_property, and every layer reads them anyway).
    key_hidden: torch.Tensor | None  # [B, T, S] bool: ~key_valid
    flat_key_slots: torch.Tensor  # [B*S] key_slots flattened, for index_select
    # Kernel path (masks=False): key_slots as int32 with -1 past each sequence's length, built once
    # per step for every full-indexer layer (kernel_path.indexer_slots).
    live_key_slots: torch.Tensor | None = None

    @classmethod
    def from_batch(cls, batch: ForwardBatch, page_size: int, masks: bool = True) -> AttentionMetadata:
        """masks=False leaves key_valid / key_hidden None: the kernels path never reads them, and
        at long context they are the step's largest metadata (B*T*S bools each)."""
        device = batch.input_ids.device
        n, b = batch.num_tokens, batch.num_seqs
        qsl = batch.query_start_loc
        q_lens = qsl[1:] - qsl[:-1]
        seq_of_token = torch.repeat_interleave(torch.arange(b, device=device), q_lens, output_size=n)
        page_idx = batch.positions // page_size
        pages = batch.block_table[seq_of_token, page_idx]
        slot_mapping = pages * page_size + batch.positions % page_size
        max_q = int(q_lens.max()) if b else 0
        max_s = int(batch.seq_lens.max()) if b else 0

        key_pos = torch.arange(max_s, device=device)
        key_pages = batch.block_table[:, key_pos // page_size].clamp_min(0)
        key_slots = key_pages * page_size + key_pos % page_size  # [B, S]

        offset_in_seq = torch.arange(n, device=device) - qsl[seq_of_token]
        query_rows = seq_of_token * max_q + offset_in_seq
        key_valid = key_hidden = None
        if masks:
            # Query positions in the padded layout; padded rows see key 0 only so no row is empty.
            qpos = torch.zeros(b * max_q, dtype=torch.long, device=device)
            qpos[query_rows] = batch.positions
            key_valid = key_pos.view(1, 1, -1) <= qpos.view(b, max_q, 1)
            key_valid &= (key_pos.view(1, -1) < batch.seq_lens.view(-1, 1)).unsqueeze(1)
            key_valid[..., 0] = True
            key_hidden = ~key_valid
        uniform = n == b * max_q
        return cls(
            slot_mapping, key_slots, key_valid, query_rows, seq_of_token, max_q, max_s, uniform,
            batch.positions, batch.seq_lens, key_hidden, key_slots.reshape(-1),
            None if masks else live_slots(key_slots, batch.seq_lens),
        )  # fmt: skip

    def gather_keys(self, cache) -> torch.Tensor:
        """cache [slots, D] (or a kv_formats row store) -> [B, S, D] rows of every visible key, in
        the model dtype (index_select: cheaper than advanced indexing on the per-layer decode path;
        an FP8 store dequantizes just these rows)."""
        b, s = self.key_slots.shape
        if isinstance(cache, torch.Tensor):
            rows = cache.index_select(0, self.flat_key_slots)
        else:
            rows = cache.gather(self.flat_key_slots)
        return rows.view(b, s, rows.shape[-1])

    def to_padded(self, x: torch.Tensor) -> torch.Tensor:
        """[N, ...] flat rows -> [B, T, ...] padded query layout (padding rows are zero)."""
        b = self.key_slots.shape[0]
        if self.uniform:
            return x.view(b, self.max_query_len, *x.shape[1:])
        out = x.new_zeros((b * self.max_query_len, *x.shape[1:]))
        out[self.query_rows] = x
        return out.view(b, self.max_query_len, *x.shape[1:])

    def from_padded(self, x: torch.Tensor) -> torch.Tensor:
        """[B, T, ...] -> [N, ...]"""
        if self.uniform:
            return x.reshape(-1, *x.shape[2:])
        return x.reshape(-1, *x.shape[2:])[self.query_rows]
