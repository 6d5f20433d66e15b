"""Continuous batching over the paged KV cache.

Each step packs, under `max_batch_tokens`: one decode (plus its speculative drafts) per running
sequence, then prefill chunks of at most `chunk_size` for sequences still prefilling, then new
admissions. Waiting sequences are admitted longest-cached-prefix first, except that any that has
waited `max_wait_steps` (and every preempted one) goes first in arrival order, so nobody starves.
When pages run out the cache evicts; when that is not enough the youngest running sequence is
preempted: its computed pages go to the prefix cache and it re-enters the waiting queue, to be
resumed from whatever of its prefix survives there.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Optional

from inference.engine.engine_config import EngineConfig
from inference.engine.page_allocator import PageAllocator
from inference.engine.radix_cache import RadixCache
from inference.engine.sequence import Sequence, Status

# Matching every waiting request costs a tree walk each; past this many, plain FIFO.
_LPM_WINDOW = 128


@dataclass
class ScheduledItem:
    seq: Sequence
    start: int  # position of the first token fed this step (= num_computed before the step)
    token_ids: list[int]  # tokens fed: uncomputed prompt chunk, or [last token] + drafts
    num_logits: int  # trailing positions whose logits are needed (0 for a mid-prompt chunk)

    @property
    def num_drafts(self) -> int:
        return len(self.token_ids) - 1 if self.num_logits > 1 else 0


@dataclass
class ScheduledBatch:
    items: list[ScheduledItem] = field(default_factory=list)
    restored_pages: int = 0  # pages (tails included) copied host -> device this step (cost model / stats)

    @property
    def num_tokens(self) -> int:
        return sum(len(it.token_ids) for it in self.items)


class Scheduler:
    def __init__(self, config: EngineConfig, cache: RadixCache, allocator: PageAllocator):
        self.config = config
        self.cache = cache
        self.allocator = allocator
        self.page_size = config.page_size
        self.waiting: deque[Sequence] = deque()
        self.running: list[Sequence] = []
        self.num_preemptions = 0

    # ---- queue management ----
    def add(self, seq: Sequence) -> None:
        seq.status = Status.WAITING
        self.waiting.append(seq)

    def has_work(self) -> bool:
        return bool(self.waiting or self.running)

    def remove(self, seq: Sequence) -> None:
        if seq in self.running:
            self.running.remove(seq)
        elif seq in self.waiting:
            self.waiting.remove(seq)

    # ---- one step ----
    def schedule(self) -> Optional[ScheduledBatch]:
        batch = ScheduledBatch()
        budget = self.config.max_batch_tokens
        # Oldest first, so preemption (which takes the youngest) never hits one already scheduled.
        self.running.sort(key=lambda s: s.arrival)
        for seq in list(self.running):
            if seq.status is not Status.RUNNING or budget <= 0:
                continue
            if seq.in_decode:
                n_feed = 1 + len(seq.draft_tokens)
                if n_feed > budget:
                    seq.draft_tokens = seq.draft_tokens[:budget - 1]
                    n_feed = budget
            else:
                n_feed = _stop_at(min(seq.num_uncomputed, self.config.chunk_size, budget), seq.num_computed,
                                  seq.snapshot_at)
            if not self._reserve(seq, seq.num_computed + n_feed, may_preempt=True):
                continue
            batch.items.append(self._item(seq, n_feed))
            budget -= n_feed
        batch.restored_pages += self._admit(batch, budget)
        for seq in self.waiting:
            seq.wait_steps += 1
        return batch if batch.items else None

    def _item(self, seq: Sequence, n_feed: int) -> ScheduledItem:
        start = seq.num_computed
        if seq.in_decode:
            tokens = [seq.tokens[-1]] + seq.draft_tokens[:n_feed - 1]
            return ScheduledItem(seq, start, tokens, num_logits=len(tokens))
        tokens = seq.tokens[start:start + n_feed]
        return ScheduledItem(seq, start, tokens, num_logits=1 if start + n_feed == len(seq.tokens) else 0)

    def _admission_order(self) -> list[Sequence]:
        if len(self.waiting) <= 1 or len(self.waiting) > _LPM_WINDOW or not self.cache.enabled:
            return list(self.waiting)
        ps = self.page_size

        def key(s: Sequence):
            urgent = s.wait_steps >= self.config.max_wait_steps or s.num_preemptions > 0
            cached = 0 if urgent else self.cache.peek(s.cache_tokens, (len(s.tokens) - 1) // ps)
            return (not urgent, -cached, s.arrival)

        return sorted(self.waiting, key=key)

    def _admit(self, batch: ScheduledBatch, budget: int) -> int:
        restored = 0
        # First pages of uncached prompts admitted this step: a sibling that starts the same way
        # (parallel sessions on one system prompt) waits one step and then hits the pages the
        # first one wrote, instead of computing the same prefix alongside it.
        computing: set[tuple] = set()
        for seq in self._admission_order():
            if budget <= 0 or len(self.running) >= self.config.max_running:
                break
            key = seq.cache_tokens  # the tokens, with image spans keyed by content (multimodal.py)
            match = self.cache.match(key, (len(seq.tokens) - 1) // self.page_size)
            if self.cache.enabled and not match.device_pages and not match.host_nodes \
                    and len(seq.tokens) > self.page_size:
                first_page = tuple(key[:self.page_size])
                if first_page in computing:
                    continue
                computing.add(first_page)
            self.cache.lock(match.node)
            locked = match.node
            num_matched = (len(match.device_pages) + match.num_host_pages) * self.page_size
            tail = self.cache.match_tail(match.node, key, num_matched, len(seq.tokens) - 1)
            # Hybrid models: cut back to where a recurrent-state snapshot lets the request resume.
            plan = self.cache.states.plan(match, tail)
            match, tail = plan.match, plan.tail
            n_device, n_host = len(match.device_pages), match.num_host_pages
            num_cached = (n_device + n_host) * self.page_size
            n_tail = tail.n if tail is not None else 0
            n_feed = _stop_at(min(len(seq.tokens) - num_cached - n_tail, self.config.chunk_size, budget),
                              num_cached + n_tail, plan.snapshot_at)
            # host pages to restore + a private copy of the partly matched page + new pages
            need = self._pages_for(num_cached + n_tail + n_feed) - n_device
            if not self.cache.make_room(need):
                self.cache.states.abandon(plan)
                self.cache.unlock(locked)
                break  # no room without preempting running work: wait for it to finish
            self.cache.restore(match)
            taken = self.cache.take_tail(tail) if tail is not None else None
            if taken is None:
                n_tail = 0  # make_room dropped that page itself: recompute those tokens
            tail_page, tail_from_host = taken if taken is not None else (None, False)
            restored += n_host + int(tail_from_host)
            self.waiting.remove(seq)
            if not seq.admitted:
                seq.admitted = True
                seq.cached_device = n_device * self.page_size + (0 if tail_from_host else n_tail)
                seq.cached_host = n_host * self.page_size + (n_tail if tail_from_host else 0)
            seq.pages = list(match.device_pages)
            seq.num_tree_pages = len(seq.pages)
            if tail_page is not None:
                seq.pages.append(tail_page)
            seq.lock_node = locked
            seq.num_computed = num_cached + n_tail
            restored += self.cache.states.resume(seq, plan)
            seq.status = Status.RUNNING
            seq.draft_tokens = []
            seq.wait_steps = 0
            self.running.append(seq)
            self._grow(seq, seq.num_computed + n_feed)
            batch.items.append(self._item(seq, n_feed))
            budget -= n_feed
        return restored

    # ---- pages ----
    def _pages_for(self, num_tokens: int) -> int:
        return -(-num_tokens // self.page_size)

    def _grow(self, seq: Sequence, num_tokens: int) -> None:
        extra = self._pages_for(num_tokens) - len(seq.pages)
        if extra > 0:
            seq.pages.extend(self.allocator.alloc(extra))

    def grow(self, seq: Sequence, num_tokens: int) -> bool:
        """Pages for `num_tokens` if the cache can make room, without preempting anyone."""
        need = self._pages_for(num_tokens) - len(seq.pages)
        if need > 0 and not self.cache.make_room(need):
            return False
        self._grow(seq, num_tokens)
        return True

    def _reserve(self, seq: Sequence, num_tokens: int, may_preempt: bool) -> bool:
        """Make `seq` hold pages for `num_tokens`, evicting cache and then preempting the
        youngest running sequences (possibly `seq` itself, which then returns False)."""
        need = self._pages_for(num_tokens) - len(seq.pages)
        while need > 0 and not self.cache.make_room(need):
            victim = max((s for s in self.running if s.status is Status.RUNNING), key=lambda s: s.arrival)
            self.preempt(victim)
            if victim is seq:
                return False
        self._grow(seq, num_tokens)
        return True

    def preempt(self, seq: Sequence) -> None:
        self.release(seq)
        self.running.remove(seq)
        seq.status = Status.WAITING
        seq.num_preemptions += 1
        seq.draft_tokens = []
        seq.mtp_hidden = None
        self.num_preemptions += 1
        self.waiting.appendleft(seq)

    def cache_prefix(self, seq: Sequence) -> None:
        """Share a running sequence's computed whole pages through the cache right away, so
        requests that arrive while it is still prefilling (parallel sessions on one system
        prompt) hit them. Where the tree already held those tokens, switch to its pages."""
        n_full = min(seq.num_computed // self.page_size, len(seq.pages))
        if not self.cache.enabled or n_full <= seq.num_tree_pages:
            return
        tokens = seq.cache_tokens[:n_full * self.page_size]
        _, leftover = self.cache.insert(tokens, seq.pages[:n_full])
        match = self.cache.match(tokens, n_full)
        self.cache.lock(match.node)
        if seq.lock_node is not None:
            self.cache.unlock(seq.lock_node)
        seq.pages[:n_full] = match.device_pages
        seq.lock_node, seq.num_tree_pages = match.node, n_full
        self.allocator.free(leftover)
        self.cache.states.reached(seq, match.node)

    # ---- release ----
    def release(self, seq: Sequence, retain_session: bool = False) -> None:
        """Hand the sequence's computed whole pages to the prefix cache, free the rest."""
        n_full = min(seq.num_computed // self.page_size, len(seq.pages))
        key = seq.cache_tokens
        node, leftover = self.cache.insert(key[:n_full * self.page_size], seq.pages[:n_full])
        rest = seq.pages[n_full:]
        partial = tuple(key[n_full * self.page_size:seq.num_computed])
        tail = None
        if rest and partial and self.cache.attach_tail(node, partial, rest[0]):
            rest, tail = rest[1:], node.tail
        self.allocator.free(leftover + rest)
        if seq.lock_node is not None:
            self.cache.unlock(seq.lock_node)
        # Hybrid models: save the recurrent state where the sequence stopped (and prune what no
        # snapshot backs); the default attachment returns `node` unchanged.
        node = self.cache.states.keep(seq, node, tail, seq.lock_node)
        if retain_session and seq.session_id is not None:
            self.cache.retain(seq.session_id, node, self.config.session_ttl_s)
        seq.pages, seq.num_tree_pages, seq.lock_node, seq.num_computed = [], 0, None, 0

    def finish(self, seq: Sequence, reason: str) -> None:
        """Finish (or abort) a sequence, wherever it is."""
        if seq.status is Status.RUNNING:
            self.release(seq, retain_session=reason != "abort")
        self.remove(seq)
        seq.status = Status.FINISHED
        seq.finish_reason = reason


def _stop_at(n_feed: int, start: int, stop: Optional[int]) -> int:
    """A prefill chunk of `n_feed` tokens from `start` ends at `stop` (where the cache wants the
    model's recurrent state saved) when it would cross it."""
    return min(n_feed, stop - start) if stop is not None and start < stop else n_feed
