"""A request's mutable state while the engine works on it."""

from __future__ import annotations

import enum
import itertools
from typing import Any, Optional

from inference.engine.multimodal import PromptImage, cache_key_tokens
from inference.engine.radix_cache import Node
from inference.engine.request import TokenLogprob
from inference.engine.sampling_params import SamplingParams

_arrivals = itertools.count()


class Status(enum.Enum):
    WAITING = "waiting"
    RUNNING = "running"
    FINISHED = "finished"


class Sequence:
    """Tokens = prompt + output so far. `num_computed` of them have KV in `pages`; the leading
    `num_tree_pages` pages belong to the radix cache (locked through `lock_node`), the rest are
    private to this sequence until it finishes and hands them to the cache."""

    def __init__(self, request_id: str, prompt_ids: list[int], params: SamplingParams,
                 session_id: Optional[str] = None, reasoning_effort: Optional[str] = None,
                 stop_token_ids: frozenset[int] = frozenset(), images: tuple[PromptImage, ...] = ()):
        self.request_id = request_id
        self.tokens = list(prompt_ids)
        self.prompt_len = len(prompt_ids)
        self.images = tuple(images)
        # The cache key; it grows with `tokens` (which only ever grow), lazily in cache_tokens.
        self._key = cache_key_tokens(self.tokens, list(self.images)) if self.images else None
        self.image_embeds: Any = None  # the images' rows, set by a vision runner while the prompt prefills
        self.params = params
        self.session_id = session_id
        self.reasoning_effort = reasoning_effort
        self.stop_token_ids = stop_token_ids
        self.status = Status.WAITING
        self.arrival = next(_arrivals)
        self.wait_steps = 0
        self.num_computed = 0
        self.dp_rank = 0  # DP attention: the rank whose KV pages hold this sequence (dp_scheduler.py)
        self.pages: list[int] = []
        self.num_tree_pages = 0
        self.lock_node: Optional[Node] = None
        # Hybrid models: a page boundary ahead where the cache wants the recurrent state saved
        # (a shared prefix with pages but no snapshot); prefill chunks stop there.
        self.snapshot_at: Optional[int] = None
        self.admitted = False
        self.cached_device = 0
        self.cached_host = 0
        self.num_preemptions = 0
        self.finish_reason: Optional[str] = None
        self.stop_reason: Optional[str | int] = None
        self.draft_tokens: list[int] = []
        self.spec_drafted = 0
        self.spec_accepted = 0
        self.logprobs: Optional[list[TokenLogprob]] = [] if params.logprobs is not None else None
        self.reasoning: Any = None  # ReasoningState when an effort is set
        self.grammar: Any = None  # GrammarState when params.grammar is set
        self.mtp_hidden: Any = None  # target hidden state feeding the next MTP draft
        self.on_tokens: Any = None  # callback(seq, new_token_ids) installed by the engine

    @property
    def cache_tokens(self) -> list[int]:
        """What the prefix cache keys this sequence by: its tokens, with image spans replaced by
        their content-hash values (multimodal.py)."""
        if self._key is None:
            return self.tokens
        if len(self._key) < len(self.tokens):
            self._key.extend(self.tokens[len(self._key):])
        return self._key

    @property
    def num_prompt_tokens(self) -> int:
        return self.prompt_len

    @property
    def output_ids(self) -> list[int]:
        return self.tokens[self.prompt_len:]

    @property
    def num_output(self) -> int:
        return len(self.tokens) - self.prompt_len

    @property
    def num_uncomputed(self) -> int:
        return len(self.tokens) - self.num_computed

    @property
    def in_decode(self) -> bool:
        return self.num_uncomputed == 1 and self.num_output > 0

    @property
    def finished(self) -> bool:
        return self.status is Status.FINISHED
