"""After a forward: sample (and verify drafts) for every item, update sequences, detect stops."""

from __future__ import annotations

from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Callable, Optional

from inference.engine.model_runner import TargetOutput
from inference.engine.request import TokenLogprob
from inference.engine.sampler import SampleRow, sample
from inference.engine.scheduler import ScheduledItem
from inference.engine.sequence import Sequence

# Stop strings are searched in the detokenized tail of the output; no realistic stop string
# spans more tokens than this.
_STOP_WINDOW_TOKENS = 64


@dataclass
class ItemOutcome:
    item: ScheduledItem
    index: int  # position of the item in the step's batch
    new_tokens: list[int] = field(default_factory=list)
    logprobs: list[TokenLogprob] = field(default_factory=list)
    accepted: int = 0  # drafts accepted
    finish: Optional[tuple[str, Optional[str | int]]] = None  # (reason, stop string / token id)

    @property
    def num_valid(self) -> int:
        """Fed tokens whose KV is now valid."""
        if self.item.num_logits <= 1:
            return len(self.item.token_ids)
        return 1 + self.accepted


class StopChecker:
    def __init__(self, eos_ids: frozenset[int], max_position: int,
                 detokenize: Optional[Callable[[list[int]], str]] = None):
        self.eos_ids = eos_ids
        self.max_position = max_position
        self.detokenize = detokenize

    def check(self, seq: Sequence, token: int) -> Optional[tuple[str, Optional[str | int]]]:
        p = seq.params
        if token in seq.stop_token_ids or (not p.ignore_eos and token in self.eos_ids):
            return "stop", token
        if p.stop and self.detokenize is not None:
            text = self.detokenize(seq.output_ids[-_STOP_WINDOW_TOKENS:])
            for s in p.stop:
                if s and s in text:
                    return "stop", s
        if seq.num_output >= p.max_tokens or len(seq.tokens) >= self.max_position:
            return "length", None
        return None


def process_outputs(items: list[ScheduledItem], out: Optional[TargetOutput], stops: StopChecker,
                    grammar=None, first_masks: Optional[Future] = None,
                    sampled: Optional[tuple[list[int], list]] = None) -> list[ItemOutcome]:
    """Sample position by position (batched over items) so drafts are verified in order, with
    every reasoning-budget, grammar and stop decision seeing the tokens accepted before it.

    `grammar` (a GrammarRuntime, None when no request ever had one) fills the masks of the
    constrained rows; `first_masks` holds position 0's masks, one row per item, filled while the
    forward ran (engine.step); later positions (draft verification) are filled here.

    `sampled`: position 0's tokens and logprobs, one per item, already sampled on the device (an
    overlapped step, overlap.py: its items have no drafts, grammar or penalties, and no reasoning
    budget forces or bans their token)."""
    outcomes = [ItemOutcome(it, i) for i, it in enumerate(items)]
    live = [o for o in outcomes if o.item.num_logits > 0]
    j = 0
    while live:
        if j == 0 and sampled is not None:
            tokens, logprobs = [sampled[0][o.index] for o in live], [sampled[1][o.index] for o in live]
        else:
            mask = None
            if j == 0 and first_masks is not None:
                full = first_masks.result()
                mask = full[[o.index for o in live]] if full is not None else None
            elif grammar is not None:
                mask = grammar.fill([o.item.seq.grammar for o in live])
            rows = [sample_row(o.item.seq) for o in live]
            idx = [out.logit_rows[o.index] + j for o in live]
            tokens, logprobs = sample(out.logits[idx], rows, mask)
        still = []
        for o, tok, lp in zip(live, tokens, logprobs):
            seq = o.item.seq
            seq.tokens.append(tok)
            o.new_tokens.append(tok)
            if seq.reasoning is not None:
                seq.reasoning.advance(tok)
            if seq.grammar is not None:
                seq.grammar.accept(tok)
            if lp is not None:
                o.logprobs.append(lp)
            matched = j < o.item.num_drafts and tok == o.item.token_ids[j + 1]
            if matched:
                o.accepted += 1
            o.finish = stops.check(seq, tok)
            if matched and o.finish is None:
                still.append(o)
        live, j = still, j + 1
    return outcomes


def sample_row(seq: Sequence, output_index: Optional[int] = None) -> SampleRow:
    """How the sequence's next token is sampled; `output_index`: its index in the output (default:
    the next one after the tokens the sequence holds)."""
    rs = seq.reasoning
    return SampleRow(seq.params, seq.num_output if output_index is None else output_index,
                     forced=rs.forced_token() if rs else None, banned=rs.banned_token() if rs else None,
                     tokens=seq.tokens if seq.params.penalized else None, prompt_len=seq.prompt_len)
