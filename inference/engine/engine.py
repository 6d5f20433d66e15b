"""The serving engine: requests in, tokens out, one model step at a time.

`submit` is thread-safe and returns a handle that streams `StreamDelta`s. The step loop runs in
a background thread after `start()` (or as a context manager); without it, handles and
`generate` drive the steps inline in the caller's thread, which keeps tests deterministic.
"""

from __future__ import annotations

import itertools
import threading
import time
from pathlib import Path
from typing import Callable, Iterable, Optional

import torch

from inference.engine.engine_config import EngineConfig
from inference.engine.glm5_parts import build_glm5_parts
from inference.engine.multimodal import check_request_images
from inference.engine.output_processor import StopChecker, process_outputs
from inference.engine.overlap import overlap_scheduler
from inference.engine.pool_stats import count_hits, new_hits, pool_stats
from inference.engine.reasoning_budget import make_reasoning_state
from inference.engine.request import EngineError, GenerateRequest, GenerateResult, StreamDelta, Usage
from inference.engine.request_handle import RequestHandle
from inference.engine.sequence import Sequence, Status
from inference.engine.speculative import CatchUp
from inference.engine.think_tokens import think_token_ids
from inference.glm5_next.describe import is_flash_checkpoint
from inference.grammar.runtime import GrammarError, LazyGrammarRuntime
from inference.grammar.spec import GrammarSpec

class Engine:
    def __init__(self, checkpoint_path: str | Path, config: EngineConfig,
                 detokenize: Optional[Callable[[list[int]], str]] = None,
                 clock: Callable[[], float] = time.monotonic):
        self.config = config
        # Tensor/expert parallel: the followers start (and load their shards) beside this process.
        from inference.parallel.engine_ranks import abort_ranks, start_ranks

        self.ranks = start_ranks(checkpoint_path, config)
        self.dp = None  # DP attention: the scheduler over every rank's KV pool (dp_scheduler.py)
        self.fatal: Optional[Exception] = None  # set when a rank fails: the engine cannot go on
        self.on_fatal: list[Callable[[Exception], None]] = []
        try:
            self._build(checkpoint_path, config, detokenize, clock)
        except BaseException:
            if self.ranks is not None:
                abort_ranks(self.ranks)
            raise

    def _build(self, checkpoint_path, config: EngineConfig, detokenize, clock) -> None:
        self.vision = None  # image inputs (glm5_next/image_inputs.py) on checkpoints with a vision tower
        if is_flash_checkpoint(Path(checkpoint_path)):  # GLM-5.3-Flash: its own model, cache and runner
            from inference.glm5_next.engine_runner import build_flash_parts

            build_flash_parts(self, checkpoint_path, config, clock)
            return self._build_common(checkpoint_path, config, detokenize, flash=True)
        build_glm5_parts(self, checkpoint_path, config, clock)
        self._build_common(checkpoint_path, config, detokenize)

    def _build_common(self, checkpoint_path, config: EngineConfig, detokenize, flash: bool = False) -> None:
        start_id, end_id = think_token_ids(Path(checkpoint_path))
        self.think_start_id = config.think_start_id if config.think_start_id is not None else start_id
        self.think_end_id = config.think_end_id if config.think_end_id is not None else end_id
        self.stops = StopChecker(frozenset(self.model_config.eos_token_id), self.max_sequence, detokenize)
        # Built on the first constrained request: others never load the grammar library.
        self.grammar = LazyGrammarRuntime(checkpoint_path, self.model_config.vocab_size,
                                          list(self.model_config.eos_token_id))

        self._ids = itertools.count()
        self._lock = threading.Lock()  # guards the inbox and abort list
        self._step_lock = threading.Lock()  # one step at a time, whichever thread drives
        self._wake = threading.Condition(self._lock)
        self._inbox: list[tuple[Sequence, RequestHandle]] = []
        self._aborts: list[str] = []
        self._live: dict[str, tuple[Sequence, RequestHandle]] = {}
        self._thread: Optional[threading.Thread] = None
        self._stopping = False
        self.num_steps = 0
        self._hit_tokens = new_hits()
        self.overlap = overlap_scheduler(self, flash)  # None: every step is serial

    def _rank_failed(self, reason: str) -> None:
        """From the rank monitor: a follower died. Fail everything now; nothing can run again."""
        from inference.parallel.launch import RankFailure

        self._set_fatal(RankFailure(reason))

    def _set_fatal(self, exc: Exception) -> None:
        if self.fatal is not None:
            return
        self.fatal = exc
        with self._lock:
            self._stopping = True
            self._wake.notify()
        self._fail_all(exc)
        for callback in self.on_fatal:
            callback(exc)

    def _copy_page(self, src: int, dst: int) -> None:
        self.runner.copy_pages([src], [dst])

    # ---- validation ----
    def _validate_prompt(self, prompt_ids: list[int]) -> None:
        vocab = self.model_config.vocab_size
        if not prompt_ids:
            raise EngineError("prompt_ids", "empty prompt; expected at least one token id")
        bad = next((t for t in prompt_ids if not 0 <= t < vocab), None)
        if bad is not None:
            raise EngineError("prompt_ids", f"token id {bad} outside the vocabulary [0, {vocab})")

    def _validate(self, req: GenerateRequest) -> None:
        vocab = self.model_config.vocab_size
        self._validate_prompt(req.prompt_ids)
        if req.params.max_tokens < 1:
            raise EngineError("params.max_tokens", f"{req.params.max_tokens}; expected >= 1")
        if len(req.prompt_ids) >= self.max_position:
            raise EngineError("prompt_ids", f"prompt of {len(req.prompt_ids)} tokens does not fit the "
                              f"context of {self.max_position} tokens (one position is needed to generate)")
        bad = next((t for t in req.params.stop_token_ids if not 0 <= t < vocab), None)
        if bad is not None:
            raise EngineError("params.stop_token_ids", f"token id {bad} outside the vocabulary [0, {vocab})")
        bad = next((t for t in req.params.logit_bias if not 0 <= t < vocab), None)
        if bad is not None:
            raise EngineError("params.logit_bias", f"token id {bad} outside the vocabulary [0, {vocab})")
        if len(req.prompt_ids) >= self.max_sequence:
            raise EngineError("prompt_ids", f"prompt of {len(req.prompt_ids)} tokens does not fit the KV budget "
                              f"({self.max_sequence} tokens per sequence); raise kv_budget_tokens")
        if req.images:
            check_request_images(req, self.vision)
        thinking_limited = req.reasoning_effort is not None or req.reasoning_budget is not None
        if thinking_limited and (self.think_start_id is None or self.think_end_id is None):
            raise EngineError("reasoning_effort", "the checkpoint has no <think>/</think> tokens; set "
                              "EngineConfig.think_start_id / think_end_id")

    def compile_grammar(self, spec: GrammarSpec):
        """Compile (and cache) a grammar now, e.g. on a front-end's worker thread before `submit`;
        raises EngineError naming `params.grammar` when it cannot be compiled."""
        try:
            return self.grammar.get().compiler.compile(spec)
        except GrammarError as exc:
            raise EngineError("params.grammar", str(exc)) from None
        except FileNotFoundError as exc:
            raise EngineError("params.grammar", f"constrained decoding needs the checkpoint's tokenizer: {exc}") from None

    def prompt_logprobs(self, prompt_ids: list[int], top_n: int = 0):
        """Each prompt token's logprob given the tokens before it (None for the first), with its
        `top_n` alternatives; see prompt_scoring.py. Blocks until it has run between two steps."""
        from inference.engine.prompt_scoring import score_prompt

        return score_prompt(self, prompt_ids, top_n)

    # ---- public API ----
    def submit(self, req: GenerateRequest) -> RequestHandle:
        if self.fatal is not None:
            raise EngineError("engine", f"the engine has stopped: {self.fatal}")
        self._validate(req)
        rid = req.request_id or f"req-{next(self._ids)}"
        grammar_state = None
        if req.params.grammar is not None:
            # EngineError here, before anything is queued; a compiled grammar comes from the cache.
            grammar_state = self.grammar.get().new_state(self.compile_grammar(req.params.grammar), rid)
        with self._lock:
            if rid in self._live or any(s.request_id == rid for s, _ in self._inbox):
                raise EngineError("request_id", f"{rid!r} is already in flight")
        seq = Sequence(rid, req.prompt_ids, req.params, req.session_id, req.reasoning_effort,
                       stop_token_ids=frozenset(req.params.stop_token_ids), images=tuple(req.images))
        seq.reasoning = make_reasoning_state(req.reasoning_effort, self.config.reasoning_budgets,
                                             self.think_start_id, self.think_end_id, req.prompt_ids,
                                             budget=req.reasoning_budget)
        seq.grammar = grammar_state
        handle = RequestHandle(rid, self._drive)
        with self._lock:
            self._inbox.append((seq, handle))
            self._wake.notify()
        return handle

    def generate(self, requests: Iterable[GenerateRequest]) -> list[GenerateResult]:
        requests = list(requests)
        for r in requests:  # all or nothing: a bad request must not leave its batch-mates running
            self._validate(r)
        handles = [self.submit(r) for r in requests]
        return [h.result() for h in handles]

    def abort(self, request_id: str) -> None:
        with self._lock:
            self._aborts.append(request_id)
            self._wake.notify()

    def start(self) -> "Engine":
        if self._thread is None:
            self._stopping = False
            self._thread = threading.Thread(target=self._loop, name="horizon-engine", daemon=True)
            self._thread.start()
        return self

    def shutdown(self) -> None:
        if self._thread is not None:
            with self._lock:
                self._stopping = True
                self._wake.notify()
            self._thread.join()
            self._thread = None
        # Nobody will step for them any more: finish what is left as aborted.
        with self._step_lock:
            if self.overlap is not None:
                self.overlap.close()  # the tokens of a step in flight reach their requests first
            self._take_inbox()
            for seq, _ in list(self._live.values()):
                self._emit(seq, [], [], ("abort", None))
        if self.ranks is not None:
            self.runner.stop()  # Stop to every follower, then reap them

    def __enter__(self) -> "Engine":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.shutdown()

    def clear_cache(self) -> None:
        """Drop every cached prefix that no running request holds (both tiers)."""
        with self._step_lock:
            for cache in self.dp.caches if self.dp is not None else [self.prefix_cache]:
                cache.clear()

    def stats(self) -> dict:
        if self.dp is not None:  # node totals, and each rank's own under "dp_ranks"
            return {**self.dp.stats(), "steps": self.num_steps}
        return {**pool_stats(self.scheduler, self._hit_tokens), "steps": self.num_steps}

    # ---- the loop ----
    def _loop(self) -> None:
        while True:
            with self._lock:
                while not self._stopping and not self._inbox and not self._aborts and not self.scheduler.has_work() \
                        and not (self.overlap is not None and self.overlap.pending):
                    self._wake.wait()
                if self._stopping:
                    return
            try:
                self.step()
            except Exception as exc:  # never leave clients waiting on a dead loop
                from inference.parallel.launch import RankFailure

                if isinstance(exc, RankFailure):  # the ranks are out of step: stop for good
                    self._set_fatal(exc)
                    return
                self._fail_all(exc)

    def _fail_all(self, exc: Exception) -> None:
        with self._step_lock:
            if self.overlap is not None:
                self.overlap.reset()
            with self._lock:
                pending, self._inbox = self._inbox, []
            live = list(self._live.values()) + pending
            self._live.clear()
            for seq, handle in live:
                try:
                    self.scheduler.finish(seq, "abort")
                except Exception:
                    pass  # the state that raised may be inconsistent; the clients hear about it below
                handle.fail(exc)

    def _drive(self, handle: RequestHandle) -> bool:
        if self._thread is not None or self.fatal is not None:
            return False
        from inference.parallel.launch import RankFailure

        try:
            self.step()
        except RankFailure as exc:
            self._set_fatal(exc)
        return True

    @torch.inference_mode()
    def step(self) -> None:
        with self._step_lock:
            self._take_inbox()
            # Overlap scheduling (overlap.py): a decode step may already be in flight; it launches
            # the next one if it can, then processes this one.
            if self.overlap is not None and self.overlap.step():
                return
            batch = self.scheduler.schedule()
            if batch is None:
                if self.scheduler.waiting and not self.scheduler.running:
                    # Capacity is validated at submit, so this would be a scheduler bug; fail
                    # loudly rather than spin.
                    raise RuntimeError(f"scheduler cannot admit {self.scheduler.waiting[0].request_id} "
                                       f"with {self.allocator.num_free} free pages and nothing running")
                return
            if self.overlap is not None and self.overlap.try_launch(batch):
                return
            self.num_steps += 1
            want_hidden = self.drafter is not None
            grammar = self.grammar.loaded
            # On CUDA the forward only queues kernels, so constrained rows' masks are filled on a
            # worker thread meanwhile (xgrammar releases the GIL). On CPU the forward itself keeps
            # the cores busy and a thread hand-off costs more than the fill: masks are filled inline.
            first_masks = grammar.prefetch([it.seq.grammar if it.num_logits > 0 else None for it in batch.items]) \
                if grammar is not None and self.kv_cache.device.type == "cuda" else None
            out = self.runner.run_target(batch.items, want_hidden)
            self._apply_outcomes(process_outputs(batch.items, out, self.stops, grammar, first_masks), out)

    def _apply_outcomes(self, outcomes, out) -> None:
        """A step's sampled tokens into the sequences: computed KV, prefix sharing, MTP drafts
        (`out`: the step's TargetOutput, needed with MTP only), then the clients' deltas."""
        catch_up = []
        for o in outcomes:
            seq = o.item.seq
            seq.num_computed = o.item.start + o.num_valid
            if o.item.num_logits <= 1 and o.finish is None:
                self.scheduler.cache_prefix(seq)
            seq.spec_drafted += o.item.num_drafts
            seq.spec_accepted += o.accepted
            if o.finish is None and self.drafter is not None:
                catch_up.append(CatchUp(seq, o.item.start, o.num_valid, out.token_rows[o.index]))
        if self.drafter is not None:
            self.drafter.step(catch_up)
        for o in outcomes:
            self._emit(o.item.seq, o.new_tokens, o.logprobs, o.finish)

    def _take_inbox(self) -> None:
        with self._lock:
            inbox, self._inbox = self._inbox, []
            aborts, self._aborts = self._aborts, []
        for seq, handle in inbox:
            self._live[seq.request_id] = (seq, handle)
            self.scheduler.add(seq)
        for rid in aborts:
            if rid in self._live:
                self._emit(self._live[rid][0], [], [], ("abort", None))

    def _emit(self, seq: Sequence, tokens, logprobs, finish) -> None:
        if seq.status is Status.FINISHED or seq.request_id not in self._live:
            return
        handle = self._live[seq.request_id][1]
        delta = StreamDelta(token_ids=list(tokens), logprobs=list(logprobs) if seq.logprobs is not None and logprobs else None)
        if finish is not None:
            reason, stop_reason = finish
            self.scheduler.finish(seq, reason)
            del self._live[seq.request_id]
            delta.finish_reason = reason
            delta.stop_reason = stop_reason
            delta.usage = self._usage(seq)
            count_hits(self._hit_tokens, seq)
        if delta.token_ids or delta.finish_reason is not None:
            handle.push(delta)

    def _usage(self, seq: Sequence) -> Usage:
        return Usage(prompt_tokens=seq.prompt_len, cached_tokens=seq.cached_device + seq.cached_host,
                     cached_tokens_device=seq.cached_device, cached_tokens_host=seq.cached_host,
                     completion_tokens=seq.num_output, spec_draft_tokens=seq.spec_drafted,
                     spec_accepted_tokens=seq.spec_accepted)
