"""The model-runner commands of a DP-attention engine: one part per rank, or one named rank.

Under DP attention each rank owns its own sequences and KV pages, so a step command carries one
sub-batch per rank (the single-process `TargetStep` / `MtpStep`, with that rank's page ids and
hidden-state rows) and every rank runs its own part; a rank whose part is None still joins the
MoE token exchange (`idle_forward`). Because every rank sees every part, every rank knows every
rank's token and logit-row counts, and token ids: the exchanges' count all-gather and the split
embedding's id all-gather are skipped (`DPExchange.preset`). Page and
host-tier copies touch one rank's caches only (`OnRank`). Plain lists only, as runner_commands.py.
"""

from __future__ import annotations

from dataclasses import dataclass

from inference.engine.runner_commands import CopyPages, HostCopy, MtpStep, TargetStep


@dataclass(frozen=True)
class DPTargetStep:
    """A target forward on every rank: rank r runs steps[r] (None: no tokens this step)."""

    steps: list[TargetStep | None]

    @property
    def sizes(self) -> list[int]:
        """Tokens per rank: the MoE exchange's row counts."""
        return [0 if s is None else sum(len(t) for t in s.tokens) for s in self.steps]

    @property
    def logit_counts(self) -> list[int]:
        return [0 if s is None else len(s.logit_rows) for s in self.steps]

    @property
    def token_ids(self) -> list[list[int]]:
        """Every rank's input ids in batch order (the split embedding's exchange needs them all)."""
        return [[] if s is None else [t for seq in s.tokens for t in seq] for s in self.steps]

    @classmethod
    def alone(cls, rank: int, step: TargetStep, world: int) -> "DPTargetStep":
        """`step` on one rank's pages, the others idle (e.g. prompt scoring on the leader's pages)."""
        return cls([step if r == rank else None for r in range(world)])


@dataclass(frozen=True)
class DPMtpStep:
    """An MTP pass on every rank: rank r runs steps[r] (None: no spans this pass)."""

    steps: list[MtpStep | None]

    @property
    def sizes(self) -> list[int]:
        return [0 if s is None else sum(len(span.next_ids) for span in s.spans) for s in self.steps]

    @property
    def logit_counts(self) -> list[int]:
        return [0 if s is None else len(s.spans) for s in self.steps]

    @property
    def token_ids(self) -> list[list[int]]:
        return [[] if s is None else [t for span in s.spans for t in span.next_ids] for s in self.steps]


@dataclass(frozen=True)
class OnRank:
    """A page copy or host-tier copy on one rank's caches; the other ranks ignore it."""

    rank: int
    command: CopyPages | HostCopy
