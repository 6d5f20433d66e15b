"""What every rank runs under DP attention: its own part of each step, on its own pages.

Rank r takes part r of a `DPTargetStep` / `DPMtpStep` and runs it exactly as the single-process
`ModelRunner` would (same batch building, same hidden-state bookkeeping, so `HiddenRef`s and reuse
rows index this rank's own last passes); with no part it runs `idle_forward`, which still serves
its experts to the other ranks (and, with split extras, its vocab and MLP slices). The counts
and token ids every rank needs for the exchanges come from the command, not from a collective.
Afterwards each rank's logits go to the leader, padded to the largest part (one gather; none when
no rank wants logits), and only the leader samples; with split extras the vocab-split head has
gathered them to the leader already.

NOTE: a rank's `_draft_selection` is the selection of its own last MTP pass that ran the indexer
over a part of its own; an idle pass leaves it alone, so the leader's reuse rows (which only name
spans of that pass) always find it.
"""

from __future__ import annotations

from dataclasses import replace

import torch

from inference.engine.model_runner import ModelRunner
from inference.engine.runner_commands import CopyPages, HostCopy, MtpStep, TargetStep
from inference.parallel.dp_commands import DPMtpStep, DPTargetStep, OnRank


class DPRankRunner(ModelRunner):
    def __init__(self, model, cache, page_size: int, fence=lambda: None, host=None):
        super().__init__(model, cache, page_size, fence, host)
        self.parallel = model.parallel
        if not self.parallel.attention_dp:
            raise ValueError("DPRankRunner needs a model loaded with ParallelState(attention_dp=True)")

    def execute(self, cmd):
        if isinstance(cmd, DPTargetStep):
            return self._step(cmd, cmd.steps[self.parallel.rank], mtp=False)
        if isinstance(cmd, DPMtpStep):
            return self._step(cmd, cmd.steps[self.parallel.rank], mtp=True)
        if isinstance(cmd, OnRank):
            return super().execute(cmd.command) if cmd.rank == self.parallel.rank else None
        if isinstance(cmd, (TargetStep, MtpStep, CopyPages, HostCopy)):
            # Page ids mean nothing without a rank: every rank's pool numbers its pages from 0.
            raise TypeError(f"DP attention: {type(cmd).__name__} must come as a per-rank command")
        return super().execute(cmd)

    def _step(self, cmd: DPTargetStep | DPMtpStep, mine, mtp: bool):
        dp, split = self.parallel.dp, self.parallel.dp_split_extras
        dp.preset(cmd.sizes, cmd.logit_counts, cmd.token_ids if split else None)
        if mine is None:
            logits = self.model.idle_forward(mtp=mtp)
        else:
            logits = (self._own_mtp(mine) if mtp else self._target(mine)).logits
        if split:  # the vocab-split head gathered every rank's logit rows to the leader already
            return dp.per_rank(logits) if self.parallel.is_leader else None
        return self._gather_logits(logits, cmd.logit_counts)

    def _own_mtp(self, step: MtpStep):
        if step.reuse_rows is not None and self._draft_selection is None:
            # This rank's last indexer pass had no sequence past index_topk (every key visible, no
            # selection kept): run the indexer, as one process does when its whole batch is short.
            # Keep "no selection": later reuse rows still name spans of that pass.
            out = self._mtp(replace(step, reuse_rows=None))
            self._draft_selection = None
            return out
        return self._mtp(step)

    def _gather_logits(self, logits: torch.Tensor | None, counts: list[int]) -> list[torch.Tensor | None] | None:
        """On the leader: each rank's logits [counts[r], V] (None where a rank had none); None elsewhere."""
        most = max(counts)
        if most == 0:  # every rank knows this from the command: no collective
            return [None] * len(counts) if self.parallel.is_leader else None
        vocab = self.model.config.vocab_size
        mine = logits if logits is not None else torch.empty(0, vocab, dtype=self.model.dtype, device=self.device)
        if mine.shape[0] < most:
            mine = torch.cat([mine, mine.new_zeros(most - mine.shape[0], vocab)])
        gathered = self.parallel.comm.gather_to_leader(mine.contiguous(), dim=0)
        if gathered is None:
            return None
        return [gathered[r * most: r * most + n] if n else None for r, n in enumerate(counts)]
