"""GLM-5.3-Flash in the serving engine: the model runner and the engine parts it needs.

What works: continuous batching with chunked prefill and decode mixed in one forward
(`Glm5NextForCausalLM.forward_batch`), DSA rows in the engine's pages, one KDA state slot per
running sequence (slots = EngineConfig.max_running, `state_bytes_per_sequence` each), preemption
(the victim's slot is reclaimed; it recomputes from token 0 when readmitted), abort, images
(`engine.vision` turns image parts into PromptImages; image_rows.py embeds each request's
images once and feeds their rows to the chunks that hold their positions).
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
from pathlib import Path

import torch

from inference.engine.model_runner import ModelRunner, TargetOutput
from inference.engine.scheduler import ScheduledItem
from inference.engine.sequence import Status
from inference.glm5_next.describe import kv_bytes_per_token
from inference.glm5_next.image_rows import ImageRows

log = logging.getLogger(__name__)


class FlashRunner(ModelRunner):
    def __init__(self, model, cache, page_size: int, images: ImageRows | None = None):
        super().__init__(model, cache, page_size)
        self._slot_of: dict[int, tuple[object, int]] = {}  # id(seq) -> (seq, slot)
        self._free = list(range(cache.slots - 1, -1, -1))
        self.images = images  # None: a text-only load (the engine refuses image requests)

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
        image_rows = self.images.for_step(items, token_rows) if self.images is not None else None
        logits = self.model.forward_batch(batch, self.cache, slots, image_rows)
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

    refused = {"num_speculative_tokens": config.num_speculative_tokens > 0, "compile_decode": config.compile_decode,
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
    engine.vision = _vision_inputs(engine.model, Path(checkpoint_path), config)
    rows = None
    if engine.vision is not None:
        st = engine.vision.settings
        rows = ImageRows(engine.model, st.patch_size, st.merge_size, st.temporal_patch_size)
    engine.runner = FlashRunner(engine.model, engine.kv_cache, ps, rows)
    engine.host.copier = engine.runner.host_copy
    engine.max_position = engine.model_config.max_position_embeddings
    engine.max_sequence = min(engine.max_position, engine.num_device_pages * ps)
    engine.drafter = None


def _vision_inputs(model, path: Path, config):
    """The image front half (image_inputs.py) when the checkpoint has a vision tower, else None."""
    from inference.glm5_next.image_inputs import FlashImageInputs, ProcessorSettings
    from inference.glm5_next.image_processor import ImageLimits

    if not hasattr(model.model, "visual"):
        return None
    settings = ProcessorSettings.from_checkpoint(path)
    tower = model.model.visual.cfg
    if (settings.patch_size, settings.merge_size, settings.temporal_patch_size) != \
            (tower.patch_size, tower.spatial_merge_size, tower.temporal_patch_size):
        raise ValueError(f"preprocessor_config.json: patch_size/merge_size/temporal_patch_size "
                         f"{settings.patch_size}/{settings.merge_size}/{settings.temporal_patch_size} disagree with "
                         f"vision_config's {tower.patch_size}/{tower.spatial_merge_size}/{tower.temporal_patch_size}")
    return FlashImageInputs(model.config.image_token_id, settings, ImageLimits(max_bytes=config.max_image_bytes))
