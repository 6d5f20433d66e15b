"""The overlap scheduler: decode step N+1 is launched before step N's tokens are read.

As SGLang's overlap scheduler does, while step N runs on the device the host launches step N+1
and then processes step N's results (stop checks, detokenizing, emitting). Step N+1 feeds each
sequence the token step N samples, which the host does not know yet: its id is written as a
"future" -(row + 1), resolved on the device from the runner's last sampled tokens
(model_runner.resolve_future_ids), so launching N+1 needs no device->host transfer. The sampled
tokens (and logprobs) are the one transfer per step, read after N+1 is launched.

Which steps overlap: decode steps (one token per sequence, no drafts) whose rows sample without
host state: no grammar, penalties or logit bias, and no reasoning budget about to force or ban a
token (a budget still two tokens or more from spent cannot). Sampling runs on the device
(sampler.sample_tensors: the same ops as the serial sampler; seeded rows draw the same CPU-keyed
noise, so seeded outputs are identical). Every other step runs serially (engine.py), after the
step in flight has been processed.

Step N+1 continues a pipeline only when it is exactly the batch the serial scheduler would build
after processing N: nobody waiting (no admission), every running sequence in it, in the same
order, and free pages for every row without evicting or preempting. A sequence that N finishes
for sure (max_tokens, the KV budget) is left out of N+1; one that N finishes by EOS, a stop token
or a stop string cannot be known before N's tokens are read: its N+1 row is computed and thrown
away (never emitted, never counted, never cached: its token is never appended), and its pages,
the extra one included, are released when N is processed.

NOTE: that extra row changes N+1's batch size. CPU matmuls are not batch-invariant in the last
bits, so the other rows' logprobs at N+1 can differ from a serial run's by float rounding (tokens
identical in the tests); everywhere else the two paths compute the same batches.
"""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass
from typing import TYPE_CHECKING, Optional

from inference.engine.forward_launcher import ForwardLauncher, Launched
from inference.engine.model_runner import target_step
from inference.engine.output_processor import process_outputs, sample_row
from inference.engine.sampler import SampledRows, sample_tensors
from inference.engine.scheduler import ScheduledBatch, ScheduledItem
from inference.engine.sequence import Sequence, Status

if TYPE_CHECKING:
    from inference.engine.engine import Engine


def overlap_scheduler(engine: "Engine", flash: bool) -> Optional["OverlapScheduler"]:
    """The engine's overlap scheduler, or None when its steps run serially (EngineConfig
    .overlap_schedule; MTP and several ranks, DP attention included, are refused there already)."""
    config = engine.config
    if not config.resolved_overlap_schedule():
        return None
    if not flash:
        return OverlapScheduler(engine)
    if config.overlap_schedule:  # (its runner keeps recurrent-state slots per step: not wired here)
        raise ValueError("overlap_schedule=True: GLM-5.3-Flash checkpoints step serially; "
                         "set overlap_schedule to False or None")
    return None


@dataclass
class _InFlight:
    items: list[ScheduledItem]  # one decode row per item, in this order in the sampled tokens
    launched: Launched


class OverlapScheduler:
    def __init__(self, engine: "Engine", launcher: Optional[ForwardLauncher] = None):
        self.engine = engine
        self.launcher = launcher or ForwardLauncher(engine.kv_cache.device)
        engine.runner.barrier = self.launcher.barrier
        self.inflight: Optional[_InFlight] = None
        self.steps: Counter = Counter()  # "launched" (overlapped) and "chained" (launched before a read)
        self.wait_s = 0.0  # host time spent waiting for launched steps (benchmarks read it)

    def set_launcher(self, launcher: ForwardLauncher) -> None:
        self.drain()
        self.launcher.close()
        self.launcher = launcher
        self.engine.runner.barrier = launcher.barrier

    def describe(self) -> str:
        where = "forward on a worker thread" if self.launcher.threaded else "kernels queued inline"
        return f"overlap schedule ({where})"

    @property
    def pending(self) -> bool:
        return self.inflight is not None

    # ---- the engine's calls (under its step lock) ----
    def step(self) -> bool:
        """With a step in flight: launch the next one if it can be chained, then process the one
        in flight. True when a step is in flight again (the engine step is done); False when the
        engine should schedule serially (nothing in flight any more)."""
        prev = self.inflight
        if prev is None:
            return False
        items = self._chain(prev)
        self.inflight = self._launch(items) if items else None
        if self.inflight is not None:
            self.steps["chained"] += 1
        self._process(prev)
        return self.inflight is not None

    def try_launch(self, batch: ScheduledBatch) -> bool:
        """Launch a freshly scheduled batch without waiting for it, if it can overlap."""
        if not all(_decode_item(it) and _device_sampled(it.seq, unread=0) for it in batch.items):
            return False
        self.inflight = self._launch(batch.items)
        return True

    def drain(self) -> None:
        """Process the step in flight, if any (e.g. before a serial step or at shutdown)."""
        prev, self.inflight = self.inflight, None
        if prev is not None:
            self._process(prev)

    def reset(self) -> None:
        """Forget the step in flight after a failure (its requests are failed by the engine)."""
        self.inflight = None
        self.launcher.barrier()

    def close(self) -> None:
        """Process the step in flight (its tokens reach their requests), then stop the worker."""
        try:
            self.drain()
        except Exception:  # a failed forward: the engine aborts what is left
            self.reset()
        self.launcher.close()

    # ---- internals ----
    def _chain(self, prev: _InFlight) -> Optional[list[ScheduledItem]]:
        """Step N+1's items (futures of N's tokens), or None when the serial scheduler, after
        processing N, could build a different batch."""
        eng = self.engine
        sched = eng.scheduler
        if sched.waiting:
            return None
        running = [it for it in prev.items if it.seq.status is Status.RUNNING]
        if len(running) != len(sched.running) or not running:
            return None  # (only when something was admitted outside this pipeline)
        rows = [(i, it) for i, it in enumerate(prev.items)
                if it.seq.status is Status.RUNNING and not self._finishes_for_sure(it.seq)]
        if not rows or len(rows) > eng.config.max_batch_tokens:
            return None
        if not all(_device_sampled(it.seq, unread=1) for _, it in rows):
            return None  # a reasoning budget may force or ban N+1's token, depending on N's
        ps = eng.config.page_size
        need = sum(max(0, -(-(it.start + 2) // ps) - len(it.seq.pages)) for _, it in rows)
        if need > eng.allocator.num_free:
            return None  # the serial step would evict or preempt: let it
        items = []
        for i, it in rows:
            sched.grow(it.seq, it.start + 2)
            items.append(ScheduledItem(it.seq, it.start + 1, [-(i + 1)], num_logits=1))
        return items

    def _finishes_for_sure(self, seq: Sequence) -> bool:
        """Step N's token is this sequence's last whatever it is (max_tokens or the KV budget)."""
        return seq.num_output + 1 >= seq.params.max_tokens or len(seq.tokens) + 1 >= self.engine.stops.max_position

    def _launch(self, items: list[ScheduledItem]) -> _InFlight:
        eng = self.engine
        eng.num_steps += 1
        self.steps["launched"] += 1
        step, _, _ = target_step(items, want_hidden=False)
        # The index of each token in its output: one past the fed token's position.
        rows = [sample_row(it.seq, it.start + 1 - it.seq.prompt_len) for it in items]
        runner = eng.runner

        def forward_and_sample() -> SampledRows:
            out = runner.execute(step)
            sampled = sample_tensors(out.logits, rows)
            runner.sampled_tokens = sampled.tokens  # what the next step's future ids name
            return sampled

        return _InFlight(items, self.launcher.launch(forward_and_sample))

    def _process(self, prev: _InFlight) -> None:
        start = time.perf_counter()
        sampled = prev.launched.wait()
        self.wait_s += time.perf_counter() - start
        tokens, logprobs = sampled.read()
        eng = self.engine
        # Rows whose sequence finished (at the step before, or aborted) are dropped unread.
        live = [k for k, it in enumerate(prev.items)
                if it.seq.status is Status.RUNNING and it.seq.request_id in eng._live]
        items = [prev.items[k] for k in live]
        outcomes = process_outputs(items, None, eng.stops,
                                   sampled=([tokens[k] for k in live], [logprobs[k] for k in live]))
        eng._apply_outcomes(outcomes, None)


def _decode_item(it: ScheduledItem) -> bool:
    return it.seq.in_decode and len(it.token_ids) == 1 and it.num_logits == 1


def _device_sampled(seq: Sequence, unread: int) -> bool:
    """The row's next token needs no host state to sample, with `unread` tokens before it still
    on the device: no grammar mask, no penalties or bias over the tokens so far, and no reasoning
    budget that could force `</think>` or ban `<think>` by then (it spends at most one token each)."""
    p = seq.params
    rs = seq.reasoning
    budget_quiet = rs is None or rs.budget is None or rs.spent + unread < rs.budget
    return seq.grammar is None and budget_quiet and not p.penalized and not p.logit_bias
