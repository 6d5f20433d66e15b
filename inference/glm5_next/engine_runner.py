"""GLM-5.3-Flash in the serving engine: the model runner and the engine parts it needs.

What works: continuous batching with chunked prefill and decode mixed in one forward
(`Glm5NextForCausalLM.forward_batch`), DSA rows in the engine's pages, one KDA state slot per
running sequence (slots = EngineConfig.max_running, `state_bytes_per_sequence` each), the radix
prefix cache and host tier with KDA state snapshots (inference/engine/state_snapshots.py: a hit
resumes from the snapshot at its position; preemption resumes from the one taken when the
victim left), abort, FP8-resident weights (weight_format "fp8", fp8_weights.py), images
(`engine.vision` turns image parts into PromptImages; image_rows.py embeds each request's
images once and feeds their rows to the chunks that hold their positions). Refused by name:
MTP drafting, FP8 KV, torch.compile decode, tensor parallelism, "fp8_w8a8".

Slots are bound to sequences here, in the runner, so the scheduler stays model-agnostic: a
sequence gets a slot when the cache loads a snapshot into it (admission) or at its first forward,
every slot whose sequence is no longer RUNNING is reclaimed before a step (or when none is free),
and an item that starts at token 0 gets a zeroed slot. The runner is also the snapshots' store:
it copies between slots and the device/host snapshot pools of FlashPagedCache.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Optional

import torch

from inference.engine.model_runner import ModelRunner, TargetOutput, build_forward_batch
from inference.engine.scheduler import ScheduledItem
from inference.engine.sequence import Status
from inference.glm5_next.describe import kv_bytes_per_token
from inference.glm5_next.image_rows import ImageRows
from inference.glm5_next.paged_cache import FlashPagedCache
from inference.model import ModelOutput

log = logging.getLogger(__name__)


class FlashRunner(ModelRunner):
    def __init__(self, model, cache: FlashPagedCache, page_size: int, host_cache: Optional[FlashPagedCache] = None,
                 host=None, images: ImageRows | None = None):
        super().__init__(model, cache, page_size, fence=host.fence if host is not None else lambda: None, host=host)
        self.host_cache = host_cache  # host pages and host snapshots (None without a host tier)
        self.images = images  # None: a text-only load (the engine refuses image requests)
        self._slot_of: dict[int, tuple[object, int]] = {}  # id(seq) -> (seq, slot)
        # NOTE: the cache's last slot is the scratch slot of forwards outside a step (prompt
        # scoring, one sequence from token 0 in chunks): never bound to a sequence.
        self._scratch = cache.slots - 1
        self._free = list(range(cache.slots - 2, -1, -1))
        self._step_slots: Optional[list[int]] = None
        self._step_images = None  # (flat token indices, embeddings) of the step in flight

    @property
    def slots_in_use(self) -> int:
        return len(self._slot_of)

    def _reclaim(self) -> None:
        for key, (seq, slot) in list(self._slot_of.items()):
            if seq.status is not Status.RUNNING:
                del self._slot_of[key]
                self._free.append(slot)

    def _bind(self, seq) -> int:
        entry = self._slot_of.get(id(seq))
        if entry is None:
            if not self._free:
                self._reclaim()
            if not self._free:
                raise RuntimeError(f"no free KDA state slot ({self.cache.slots} slots, max_running)")
            entry = (seq, self._free.pop())
            self._slot_of[id(seq)] = entry
        return entry[1]

    def run_target(self, items: list[ScheduledItem], want_hidden: bool) -> TargetOutput:
        if want_hidden:
            raise ValueError("GLM-5.3-Flash: MTP drafting is not supported yet (num_speculative_tokens=0)")
        self._reclaim()
        slots = []
        for it in items:
            slot = self._bind(it.seq)
            if it.start == 0:
                self.cache.reset_slot(slot)
            slots.append(slot)
        self._step_slots = slots
        if self.images is not None:
            offsets = [0]
            for it in items[:-1]:
                offsets.append(offsets[-1] + len(it.token_ids))
            self._step_images = self.images.for_step(items, offsets)
        try:
            return super().run_target(items, False)
        finally:
            self._step_slots = self._step_images = None

    def _target(self, cmd) -> ModelOutput:
        slots = self._step_slots
        if slots is None:  # a forward outside a step: prompt scoring
            if len(cmd.starts) != 1:
                raise ValueError(f"GLM-5.3-Flash: a forward outside a step runs one sequence, not {len(cmd.starts)}")
            slots = [self._scratch]
            if cmd.starts[0] == 0:
                self.cache.reset_slot(self._scratch)
        batch = build_forward_batch(cmd.tokens, cmd.starts, cmd.pages, cmd.logit_rows, self.device)
        self.fence()
        try:
            logits = self.model.forward_batch(batch, self.cache, slots, self._step_images)
        except BaseException:
            # NOTE: the states may be half written: no snapshot may be taken from them, and the
            # forward refuses to continue them (a readmitted sequence reloads or restarts).
            for slot in slots:
                self.cache.slot_lengths[slot] = -1
            raise
        return ModelOutput(hidden_states=None, logits=logits)

    # ---- the prefix cache's state store (StateStore) ----
    def save_state(self, seq, slot: int, position: int) -> bool:
        entry = self._slot_of.get(id(seq))
        if entry is None or self.cache.slot_lengths[entry[1]] != position:
            return False
        self.cache.save(entry[1], slot)
        return True

    def load_state(self, seq, slot: int, on_host: bool, position: int) -> None:
        self.cache.load(slot, self._bind(seq), position, self.host_cache if on_host else None)

    def spill_state(self, slot: int, host_slot: int) -> None:
        self.cache.spill(slot, self.host_cache, host_slot)


def build_flash_parts(engine, checkpoint_path, config, clock) -> None:
    """Engine._build for a glm5_next checkpoint: sets the same attributes the GLM-5.x path does."""
    from inference.engine.host_tier import HostTier
    from inference.engine.page_allocator import PageAllocator
    from inference.engine.radix_cache import RadixCache
    from inference.engine.scheduler import Scheduler
    from inference.engine.state_snapshots import StateSnapshots, split_budget
    from inference.glm5_next.loader import load_flash_model

    refused = {"num_speculative_tokens": config.num_speculative_tokens > 0,
               "decode_graphs": bool(config.decode_graphs or config.compile_decode),  # (None: off here)
               "kv_cache_dtype": config.kv_cache_dtype != "auto", "parallel": engine.ranks is not None}  # fmt: skip
    for name, bad in refused.items():
        if bad:
            raise ValueError(f"EngineConfig.{name}: not supported for GLM-5.3-Flash (glm5_next) checkpoints yet")
    if config.weight_format == "fp8_w8a8":
        raise ValueError("EngineConfig.weight_format='fp8_w8a8': not supported for GLM-5.3-Flash (glm5_next) checkpoints "
                         "(its fused MoE kernel has no SwiGLU clamp); use 'fp8' or 'dequant'")
    # "auto": FP8 weights stay resident on CUDA (W8A16 here), dequantized at load on CPU, as for GLM-5.x.
    weight_format = "dequant" if config.resolved_weight_format() == "dequant" else "fp8"
    dtypes = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
    engine.model = load_flash_model(checkpoint_path, dtype=dtypes[config.dtype], device=config.device,
                                    weight_format=weight_format)
    engine.model_config = mc = engine.model.config
    ps = config.page_size
    engine.cache_bytes_per_token = kv_bpt = kv_bytes_per_token(mc, engine.model.dtype.itemsize)
    state_bytes = mc.kda_state_bytes_per_sequence
    budget = config.device_pages(kv_bpt) * ps
    caching = config.enable_prefix_cache and config.state_snapshot_fraction > 0
    page_tokens, snapshots = split_budget(budget, kv_bpt, state_bytes, config.state_snapshot_fraction if caching else 0)
    if caching and snapshots == 0:
        log.warning("GLM-5.3-Flash: the KV budget cannot hold one KDA state snapshot (%d B) at state_snapshot_fraction="
                    "%s: prefix cache off", state_bytes, config.state_snapshot_fraction)
        caching = False
    if page_tokens < ps:
        raise ValueError(f"EngineConfig.state_snapshot_fraction={config.state_snapshot_fraction}: the KV budget "
                         f"({budget} tokens) leaves less than one page after {snapshots} KDA state snapshots")
    host_tokens, host_snapshots = split_budget(config.host_budget_tokens if caching else 0, kv_bpt, state_bytes,
                                               config.state_snapshot_fraction)
    engine.num_device_pages = page_tokens // ps
    # one KDA state slot per running sequence, and the runner's scratch slot
    engine.kv_cache = engine.model.new_paged_cache(engine.num_device_pages, ps, config.max_running + 1, snapshots)
    engine.state_bytes_per_sequence = engine.kv_cache.state_bytes_per_sequence
    host_pages = host_tokens // ps
    host_cache = None
    if host_pages or host_snapshots:
        host_cache = FlashPagedCache(mc, host_pages, ps, 0, "cpu", engine.model.dtype, host_snapshots)
        if engine.kv_cache.device.type == "cuda":
            host_cache.pin_memory()
    engine.allocator = PageAllocator(engine.num_device_pages)
    engine.host = HostTier(host_pages, engine.kv_cache, host_cache)
    engine.vision = _vision_inputs(engine.model, Path(checkpoint_path), config)
    rows = None
    if engine.vision is not None:
        st = engine.vision.settings
        rows = ImageRows(engine.model, st.patch_size, st.merge_size, st.temporal_patch_size)
    engine.runner = FlashRunner(engine.model, engine.kv_cache, ps, host_cache, engine.host, rows)
    engine.host.copier = engine.runner.host_copy
    states = None
    if caching:
        states = StateSnapshots(snapshots, host_snapshots, store=engine.runner,
                                host_load_pages=-(-state_bytes // (kv_bpt * ps)))
    engine.prefix_cache = RadixCache(ps, engine.allocator, engine.host, clock=clock, enabled=caching,
                                     copy_page=engine._copy_page, states=states)
    engine.scheduler = Scheduler(config, engine.prefix_cache, engine.allocator)
    engine.max_position = mc.max_position_embeddings
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
