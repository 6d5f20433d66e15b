"""MTP speculative decoding: draft k tokens with the checkpoint's nextn layer.

Verification happens in the engine's sampling loop: the target forward over [last, d1..dk]
samples position by position with the request's own sampler, and a draft is accepted only when
it equals the token the target would have produced there. Output is therefore identical with and
without speculation (greedy, and seeded sampling too); acceptance only changes the speed.

The MTP layer keeps its own KV (cache layer L). After every step it catches up over the
positions whose target KV became valid (each paired with the token that follows it), which
also yields the first draft; drafts 2..k chain on the MTP's own hidden state. With
`index_share_for_mtp_iteration` (GLM-5.2/5.3 configs) drafts 2..k attend over the keys the MTP
indexer chose for the first draft and skip the indexer, as SGLang and vLLM serve them.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from inference.engine.model_runner import MtpSpan, ModelRunner
from inference.engine.runner_commands import HiddenRef
from inference.engine.sequence import Sequence


@dataclass
class CatchUp:
    seq: Sequence
    start: int  # first position whose target KV became valid this step
    num_valid: int  # how many
    hidden_row: int  # row of `start` in the step's all-hidden tensor


class MtpDrafter:
    def __init__(self, runner: ModelRunner, num_draft: int, max_position: int, grow):
        self.runner = runner
        self.k = num_draft
        self.max_position = max_position
        self._grow = grow  # grow(seq, num_tokens) -> bool: pages without preempting anyone
        self.share_selection = runner.model.config.index_share_for_mtp_iteration

    def _budget(self, seq: Sequence) -> int:
        remaining = seq.params.max_tokens - seq.num_output - 1
        room = self.max_position - len(seq.tokens) - 1
        return max(0, min(self.k, remaining, room))

    @torch.inference_mode()
    def step(self, entries: list[CatchUp]) -> None:
        """Catch up on the last target step's verified positions (its hidden states, which the
        runner holds) and draft. Hidden states are passed by reference (HiddenRef), never copied
        out of the runner, so tensor-parallel followers replay the same passes on their own."""
        if not entries:
            return
        spans = [MtpSpan(list(e.seq.pages), e.start, e.seq.tokens[e.start + 1:e.start + e.num_valid + 1],
                         HiddenRef("target", e.hidden_row, e.num_valid)) for e in entries]
        logits, _, first_selection = self.runner.run_mtp(spans)
        share = self.share_selection and first_selection is not None
        first = logits.argmax(dim=-1).tolist()
        # seq, draft, its position, its hidden state (a row of the last MTP pass), its row in the first pass
        chain: list[tuple[Sequence, int, int, HiddenRef, int]] = []
        for i, e in enumerate(entries):
            seq = e.seq
            seq.draft_tokens = []
            if not seq.in_decode or self._budget(seq) == 0:
                continue
            seq.draft_tokens = [first[i]]
            chain.append((seq, first[i], e.start + e.num_valid, HiddenRef("mtp", i, 1), i))
        for _ in range(1, self.k):
            chain = [c for c in chain if len(c[0].draft_tokens) < self._budget(c[0]) and self._grow(c[0], c[2] + 1)]
            if not chain:
                break
            spans = [MtpSpan(list(seq.pages), pos, [tok], h) for seq, tok, pos, h, _ in chain]
            reuse = [c[4] for c in chain] if share else None
            logits, _, _ = self.runner.run_mtp(spans, reuse)
            nxt = logits.argmax(dim=-1).tolist()
            for i, (seq, _, pos, _, _) in enumerate(chain):
                seq.draft_tokens.append(nxt[i])
            chain = [(seq, nxt[i], pos + 1, HiddenRef("mtp", i, 1), row) for i, (seq, _, pos, _, row) in enumerate(chain)]
