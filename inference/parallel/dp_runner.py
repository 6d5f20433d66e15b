"""The leader's model runner under DP attention: the engine's flat calls, split into per-rank parts.

The engine and the MTP drafter speak in one flat numbering, as with one process: items in batch
order, hidden rows of "the last target forward", spans of "the last MTP pass". Here each item goes
to the rank that holds its sequence (`Sequence.dp_rank`, set by the DP scheduler) and each rank
runs its own sub-batch (DPRankRunner); the flat numbering is rank-major:

- target hidden rows: rank 0's tokens, then rank 1's, ... (`_target_base[r]` = rank r's first row);
- MTP rows: the leader remembers, for every span of the last pass (and of the last pass that ran
  its indexer), which rank ran it and at which index of that rank's part.

A HiddenRef therefore names its rank, and so does a span: the rank whose hidden state it continues.
Logits come back from every rank (gathered to the leader) and are put in the caller's order.
Copies go to one rank (`copy_pages_on` / `host_copy_on`); the plain ones are the leader's own pages.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, replace

import torch

from inference.engine.model_runner import TargetOutput, target_step
from inference.engine.runner_commands import CopyPages, HiddenRef, HostCopy, MtpSpanSpec, MtpStep, TargetStep
from inference.engine.scheduler import ScheduledItem
from inference.parallel.distributed_runner import DistributedRunner
from inference.parallel.dp_commands import DPMtpStep, DPTargetStep, OnRank
from inference.parallel.dp_rank_runner import DPRankRunner


@dataclass
class LeaderLogits:
    """A forward on the leader's own pages (prompt scoring): its logits."""

    logits: torch.Tensor


class RankSelections:
    """run_mtp's selection under DP: each rank keeps its own (and runs its indexer when it has none),
    so the drafter may always ask for reuse."""


RANK_SELECTIONS = RankSelections()


class DPLeaderRunner(DistributedRunner, DPRankRunner):
    def __init__(self, model, cache, page_size: int, group, fence=lambda: None, host=None):
        super().__init__(model, cache, page_size, group, fence, host)
        self.world = self.parallel.world
        self._target_base = [0] * (self.world + 1)
        self._mtp_rows: list[tuple[int, int]] = []  # last MTP pass: span -> (rank, index in its part)
        self._selection_rows: list[tuple[int, int]] = []  # the same for the last pass that ran its indexer

    def execute(self, cmd):
        if isinstance(cmd, TargetStep):  # the leader's own pages, the other ranks idle
            return LeaderLogits(super().execute(DPTargetStep.alone(0, cmd, self.world))[0])
        if isinstance(cmd, (CopyPages, HostCopy)):
            cmd = OnRank(0, cmd)
        return super().execute(cmd)

    # ---- copies on one rank's caches ----
    def copy_pages_on(self, rank: int, src: list[int], dst: list[int]) -> None:
        self.execute(OnRank(rank, CopyPages(src, dst)))

    def host_copy_on(self, rank: int, direction: str, src: list[int], dst: list[int]) -> None:
        self.execute(OnRank(rank, HostCopy(direction, src, dst)))

    def replica_digests(self) -> list[str]:
        raise ValueError("DP attention: ranks hold different sequences' pages; there is no replicated cache to compare")

    # ---- forwards ----
    def run_target(self, items: list[ScheduledItem], want_hidden: bool) -> TargetOutput:
        parts = self._parts([it.seq.dp_rank for it in items])
        steps, local_rows = [], {}
        for idx in parts:
            if not idx:
                steps.append(None)
                continue
            step, logit_rows, token_rows = target_step([items[i] for i in idx], want_hidden)
            steps.append(step)
            local_rows.update({i: (lr, tr) for i, lr, tr in zip(idx, logit_rows, token_rows)})
        cmd = DPTargetStep(steps)
        logits = self.execute(cmd)
        self._target_base = _cumsum(cmd.sizes)
        logit_base = _cumsum(cmd.logit_counts)
        rank_of = {i: r for r, idx in enumerate(parts) for i in idx}
        logit_rows = [logit_base[rank_of[i]] + local_rows[i][0] for i in range(len(items))]
        token_rows = [self._target_base[rank_of[i]] + local_rows[i][1] for i in range(len(items))]
        return TargetOutput(self._cat(logits), logit_rows, None, token_rows)

    def run_mtp(self, spans: list[MtpSpanSpec], reuse_rows: list[int] | None = None):
        located = [self._locate(s.hidden) for s in spans]
        parts = self._parts([rank for rank, _ in located])
        where = [(0, 0)] * len(spans)
        steps = []
        for r, idx in enumerate(parts):
            if not idx:
                steps.append(None)
                continue
            reuse = None
            if reuse_rows is not None:
                reuse = []
                for i in idx:
                    rank, k = self._selection_rows[reuse_rows[i]]
                    if rank != r:
                        raise RuntimeError(f"MTP span {i} on DP rank {r} reuses a selection of rank {rank}")
                    reuse.append(k)
            steps.append(MtpStep([replace(spans[i], hidden=located[i][1]) for i in idx], reuse))
            for k, i in enumerate(idx):
                where[i] = (r, k)
        per_rank = self.execute(DPMtpStep(steps))
        self._mtp_rows = where
        if reuse_rows is None:
            self._selection_rows = where
        logits = torch.stack([per_rank[r][k] for r, k in where]) if spans else None
        return logits, None, RANK_SELECTIONS

    # ---- the flat numbering ----
    def _parts(self, ranks: list[int]) -> list[list[int]]:
        """Indices of the entries on each rank, in their order."""
        parts: list[list[int]] = [[] for _ in range(self.world)]
        for i, r in enumerate(ranks):
            parts[r].append(i)
        return parts

    def _locate(self, ref: HiddenRef) -> tuple[int, HiddenRef]:
        """(rank, the same rows in that rank's own numbering)."""
        if ref.source == "target":
            base = self._target_base
            rank = bisect.bisect_right(base, ref.row) - 1
            if not 0 <= rank < self.world or ref.row + ref.count > base[rank + 1]:
                raise RuntimeError(f"{ref} is not inside one DP rank's rows of the last forward ({base})")
            return rank, replace(ref, row=ref.row - base[rank])
        rows = self._mtp_rows[ref.row:ref.row + ref.count]
        rank, k = rows[0]
        if len(rows) != ref.count or rows != [(rank, k + j) for j in range(ref.count)]:
            raise RuntimeError(f"{ref} is not inside one DP rank's part of the last MTP pass")
        return rank, replace(ref, row=k)

    def _cat(self, per_rank: list[torch.Tensor | None]) -> torch.Tensor:
        present = [t for t in per_rank if t is not None]
        if not present:
            return torch.empty(0, self.model.config.vocab_size, dtype=self.model.dtype, device=self.device)
        return torch.cat(present) if len(present) > 1 else present[0]


def _cumsum(sizes: list[int]) -> list[int]:
    out = [0]
    for n in sizes:
        out.append(out[-1] + n)
    return out
