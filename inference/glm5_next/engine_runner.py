"""GLM-5.3-Flash in the serving engine: the model runner and the engine parts it needs.

What works: continuous batching with chunked prefill and decode mixed in one forward
(`Glm5NextForCausalLM.forward_batch`), DSA rows in the engine's pages, one KDA state slot per
running sequence (slots = EngineConfig.max_running, `state_bytes_per_sequence` each), preemption
(the victim's slot is reclaimed; it recomputes from token 0 when readmitted), abort.
Not yet (refused or switched off with a warning): the radix prefix cache (a hit needs a KDA
state snapshot at the matched position; FlashPagedCache.snapshot/restore are the primitive, the
radix integration is the next step), the host tier, MTP drafting, FP8 KV, torch.compile decode,
tensor parallelism.

Slots are bound to sequences here, in the runner, so the scheduler stays model-agnostic: before
each step every slot whose sequence is no longer RUNNING is reclaimed, and an item that starts
at token 0 gets a zeroed slot.
"""

from __future__ import annotations

import logging

import torch

from inference.engine.model_runner import ModelRunner, TargetOutput
from inference.engine.scheduler import ScheduledItem
from inference.engine.sequence import Status
from inference.glm5_next.describe import kv_bytes_per_token

log = logging.getLogger(__name__)


class FlashRunner(ModelRunner):
    def __init__(self, model, cache, page_size: int):
        super().__init__(model, cache, page_size)
        self._slot_of: dict[int, tuple[object, int]] = {}  # id(seq) -> (seq, slot)
        self._free = list(range(cache.slots - 1, -1, -1))

    @property
    def slots_in_use(self) -> int:
        return len(self._slot_of)

    def _reclaim(self) -> None:
        for key, (seq, slot) in list(self._slot_of.items()):
            if seq.status is not Status.RUNNING:
                del self._slot_of[key]
                self._free.append(slot)

    def _slot(self, it: ScheduledItem) -> int:
        entry = self._slot_of.get(id(it.seq))
        if entry is None:
            if not self._free:
                raise RuntimeError(f"no free KDA state slot ({self.cache.slots} slots, max_running)")
            entry = (it.seq, self._free.pop())
            self._slot_of[id(it.seq)] = entry
        if it.start == 0:
            self.cache.reset_slot(entry[1])
        return entry[1]

    def run_target(self, items: list[ScheduledItem], want_hidden: bool) -> TargetOutput:
        if want_hidden:
            raise ValueError("GLM-5.3-Flash: MTP drafting is not supported yet (num_speculative_tokens=0)")
        self._reclaim()
        rows, logit_rows, token_rows, offset = [], [], [], 0
        for it in items:
            token_rows.append(offset)
            logit_rows.append(len(rows))
            n = len(it.token_ids)
            rows.extend(range(offset + n - it.num_logits, offset + n))
            offset += n
        slots = [self._slot(it) for it in items]
        batch = self._batch([list(it.token_ids) for it in items], [it.start for it in items],
                            [list(it.seq.pages) for it in items], rows)
        logits = self.model.forward_batch(batch, self.cache, slots)
        return TargetOutput(logits, logit_rows, None, token_rows)

    def copy_pages(self, src: list[int], dst: list[int]) -> None:
        for buf in (self.cache.latent, self.cache.index_keys, self.cache.index_gates):
            buf[:, dst] = buf[:, src]


def build_flash_parts(engine, checkpoint_path, config, clock) -> None:
    """Engine._build for a glm5_next checkpoint: sets the same attributes the GLM-5.x path does."""
    from inference.engine.host_tier import HostTier
    from inference.engine.page_allocator import PageAllocator
    from inference.engine.radix_cache import RadixCache
    from inference.engine.scheduler import Scheduler
    from inference.glm5_next.loader import load_flash_model

    refused = {"num_speculative_tokens": config.num_speculative_tokens > 0,
               "decode_graphs": bool(config.decode_graphs or config.compile_decode),  # (None: off here)
               "kv_cache_dtype": config.kv_cache_dtype != "auto", "parallel": engine.ranks is not None}  # fmt: skip
    for name, bad in refused.items():
        if bad:
            raise ValueError(f"EngineConfig.{name}: not supported for GLM-5.3-Flash (glm5_next) checkpoints yet")
    dtypes = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
    engine.model = load_flash_model(checkpoint_path, dtype=dtypes[config.dtype], device=config.device)
    engine.model_config = engine.model.config
    ps = config.page_size
    engine.cache_bytes_per_token = kv_bytes_per_token(engine.model_config, engine.model.dtype.itemsize)
    engine.num_device_pages = config.device_pages(engine.cache_bytes_per_token)
    engine.kv_cache = engine.model.new_paged_cache(engine.num_device_pages, ps, config.max_running)
    engine.state_bytes_per_sequence = engine.kv_cache.state_bytes_per_sequence
    if config.enable_prefix_cache or config.host_budget_tokens:
        log.warning("GLM-5.3-Flash: prefix cache and host tier are off (KDA state snapshots are not in the radix "
                    "cache yet); every request computes its whole prompt")
    engine.allocator = PageAllocator(engine.num_device_pages)
    engine.host = HostTier(0, engine.kv_cache, None)
    engine.prefix_cache = RadixCache(ps, engine.allocator, engine.host, clock=clock, enabled=False,
                                     copy_page=engine._copy_page)
    engine.scheduler = Scheduler(config, engine.prefix_cache, engine.allocator)
    engine.runner = FlashRunner(engine.model, engine.kv_cache, ps)
    engine.host.copier = engine.runner.host_copy
    engine.max_position = engine.model_config.max_position_embeddings
    engine.max_sequence = min(engine.max_position, engine.num_device_pages * ps)
    engine.drafter = None
