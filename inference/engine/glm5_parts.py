"""The GLM-5.x parts of an Engine: model, paged KV cache, host tier, radix cache, scheduler,
model runner (one process or tensor/expert-parallel ranks, DP attention), MTP drafter and the
decode graphs. GLM-5.3-Flash has its own (glm5_next/engine_runner.py: build_flash_parts)."""

from __future__ import annotations

import torch

from inference.engine.engine_config import EngineConfig
from inference.engine.host_tier import HostTier
from inference.engine.model_runner import ModelRunner
from inference.engine.page_allocator import PageAllocator
from inference.engine.radix_cache import RadixCache
from inference.engine.scheduler import Scheduler
from inference.engine.speculative import MtpDrafter

_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def build_glm5_parts(engine, checkpoint_path, config: EngineConfig, clock) -> None:
    """Engine._build for a GLM-5.x checkpoint: sets the attributes the engine's steps use."""
    from inference.kv_cache import PagedKVCache, kv_bytes_per_token
    from inference.loader import load_model

    device = config.device if engine.ranks is None else engine.ranks.device
    parallel = None if engine.ranks is None else engine.ranks.state
    # The MTP layer (weights and its KV pages) is only loaded when it drafts.
    engine.model = load_model(checkpoint_path, dtype=_DTYPES[config.dtype], device=device, parallel=parallel,
                              latent_norm_eps=config.latent_norm_eps, mtp=config.num_speculative_tokens > 0,
                              weight_format=config.resolved_weight_format())
    engine.model_config = engine.model.config
    ps = config.page_size
    kv_dtype = config.kv_cache_dtype
    engine.cache_bytes_per_token = kv_bytes_per_token(engine.model_config, engine.model.dtype, kv_dtype)
    engine.num_device_pages = config.device_pages(engine.cache_bytes_per_token)
    # Decode graphs pad batches with rows that write into one scratch page past the allocator's.
    graphs = config.resolved_decode_graphs() and engine.model.parallel.dp is None
    engine.kv_cache = engine.model.new_cache(engine.num_device_pages + graphs, ps, kv_dtype)
    host_pages = config.host_pages()
    # The host tier holds the same bytes as the device pages (FP8 stays FP8: spill and restore
    # are plain copies, never a requantization).
    host_cache = PagedKVCache(engine.model_config, host_pages, ps, engine.model.dtype, "cpu", kv_dtype) if host_pages else None
    if host_cache is not None and engine.kv_cache.device.type == "cuda":
        # Pinned host pages let the spill/restore copies run as DMA at full link bandwidth.
        host_cache.latent = [t.pin_memory() for t in host_cache.latent]
        host_cache.indexer = {k: t.pin_memory() for k, t in host_cache.indexer.items()}
    engine.allocator = PageAllocator(engine.num_device_pages)
    engine.host = HostTier(host_pages, engine.kv_cache, host_cache)
    engine.prefix_cache = RadixCache(ps, engine.allocator, engine.host, clock=clock, enabled=config.enable_prefix_cache,
                                     copy_page=engine._copy_page)
    engine.scheduler = Scheduler(config, engine.prefix_cache, engine.allocator)
    if engine.ranks is None:
        engine.runner = ModelRunner(engine.model, engine.kv_cache, ps, fence=engine.host.fence, host=engine.host)
    else:
        from inference.parallel.engine_ranks import leader_runner

        engine.runner = leader_runner(engine.ranks, engine.model, engine.kv_cache, ps, engine.host,
                                      config.parallel.heartbeat_s, engine._rank_failed)
    engine.host.copier = engine.runner.host_copy  # followers mirror every host-tier copy
    if engine.ranks is not None and engine.ranks.state.attention_dp:  # one KV pool per rank, this one is rank 0's
        from inference.parallel.dp_engine import dp_scheduler

        engine.scheduler = engine.dp = dp_scheduler(engine, config, clock)
    engine.max_position = engine.model_config.max_position_embeddings
    # A sequence also ends ("length") when it would no longer fit the KV budget with its drafts.
    engine.max_sequence = min(engine.max_position, engine.num_device_pages * ps - config.num_speculative_tokens)
    engine.drafter = (MtpDrafter(engine.runner, config.num_speculative_tokens, engine.max_sequence, engine.scheduler.grow)
                      if config.num_speculative_tokens > 0 else None)
    if engine.model.parallel.dp is None:
        _setup_decode_graphs(engine, graphs)


def _setup_decode_graphs(engine, graphs: bool) -> None:
    """Uniform steps (decode, MTP verification and drafts) through fixed buffers: as graphs
    when on, captured or compiled now on padding rows (no request waits for them), else
    eagerly (decode_graphs.py)."""
    from inference.engine.decode_graphs import GraphSettings

    config = engine.config
    mode = "eager" if not graphs else ("cuda_graphs" if engine.kv_cache.device.type == "cuda" else "compile")
    max_batch = min(config.graph_max_batch, config.max_running) if graphs else config.max_running
    settings = GraphSettings.build(engine.model_config, mode, max_batch, engine.max_sequence, config.page_size,
                                   config.num_speculative_tokens, engine.num_device_pages if graphs else None)
    engine.runner.setup_decode_graphs(settings)
