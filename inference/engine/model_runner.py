"""Turns scheduled items into `ForwardBatch`es and runs the target model and its MTP layer."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch

from inference.engine.scheduler import ScheduledItem
from inference.forward_batch import ForwardBatch


@dataclass
class TargetOutput:
    logits: torch.Tensor  # [M, V] rows for every item's trailing num_logits positions, item order
    logit_rows: list[int]  # per item: first row in `logits` (valid only when num_logits > 0)
    hidden: torch.Tensor | None  # [N, H] every fed token's hidden state (only with MTP)
    token_rows: list[int]  # per item: first row of its tokens in `hidden`


@dataclass
class MtpSpan:
    """MTP input for one sequence: positions [start, start+len(next_ids)), each paired with the
    token that follows it and the target hidden state at it."""

    pages: list[int]
    start: int
    next_ids: list[int]
    hidden: torch.Tensor  # [len(next_ids), H]


class ModelRunner:
    def __init__(self, model, cache, page_size: int, fence: Callable[[], None] = lambda: None):
        self.model = model
        self.cache = cache
        self.page_size = page_size
        self.device = model.device
        # Waits for host-tier copies (HostTier.fence): a forward reads restored pages and writes
        # pages whose spill may still be in flight.
        self.fence = fence

    def _batch(self, tokens: list[list[int]], starts: list[int], pages: list[list[int]], logit_rows: list[int]) -> ForwardBatch:
        dev = self.device
        n_per = [len(t) for t in tokens]
        starts_t = torch.tensor(starts, dtype=torch.long)
        lens_t = torch.tensor(n_per, dtype=torch.long)
        qsl = torch.zeros(len(tokens) + 1, dtype=torch.long)
        qsl[1:] = lens_t.cumsum(0)
        seq_of = torch.repeat_interleave(torch.arange(len(tokens)), lens_t)
        positions = starts_t[seq_of] + (torch.arange(int(qsl[-1])) - qsl[seq_of])
        width = max(len(p) for p in pages)
        table = torch.full((len(pages), width), -1, dtype=torch.long)
        for i, p in enumerate(pages):
            table[i, :len(p)] = torch.tensor(p, dtype=torch.long)
        flat = [t for seq in tokens for t in seq]
        return ForwardBatch(
            input_ids=torch.tensor(flat, dtype=torch.long, device=dev),
            positions=positions.to(dev),
            query_start_loc=qsl.to(dev),
            seq_lens=(starts_t + lens_t).to(dev),
            block_table=table.to(dev),
            logits_indices=torch.tensor(logit_rows, dtype=torch.long, device=dev),
        )

    def run_target(self, items: list[ScheduledItem], want_hidden: bool) -> TargetOutput:
        rows, logit_rows, token_rows, offset = [], [], [], 0
        for it in items:
            token_rows.append(offset)
            logit_rows.append(len(rows))
            n = len(it.token_ids)
            rows.extend(range(offset + n - it.num_logits, offset + n))
            offset += n
        batch = self._batch([it.token_ids for it in items], [it.start for it in items],
                            [it.seq.pages for it in items], rows)
        self.fence()
        out = self.model.forward_batch(batch, self.cache, return_all_hidden=want_hidden)
        return TargetOutput(out.logits, logit_rows, out.all_hidden_states, token_rows)

    def run_mtp(self, spans: list[MtpSpan], reuse_selection=None) -> tuple[torch.Tensor, torch.Tensor, object]:
        """One MTP pass over every span; returns (logits, pre-norm hidden) at each span's last
        position and the pass's per-sequence selection (`DraftSelection`, None when every key was
        visible). Writes the MTP layer's KV for every position of every span (with
        reuse_selection, see Glm5ForCausalLM.mtp_forward, its latent only)."""
        last_rows, offset = [], 0
        for s in spans:
            offset += len(s.next_ids)
            last_rows.append(offset - 1)
        batch = self._batch([s.next_ids for s in spans], [s.start for s in spans], [s.pages for s in spans], last_rows)
        prev = torch.cat([s.hidden for s in spans], dim=0)
        self.fence()
        out = self.model.mtp_forward(batch, prev, self.cache, reuse_selection=reuse_selection)
        return out.logits, out.hidden_states, out.draft_selection
