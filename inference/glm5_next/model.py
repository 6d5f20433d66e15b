"""GLM-5.3-Flash (`glm5_next`) causal LM, text part: KDA + MLA/DSA hybrid with mHC streams.

`forward(input_ids, state)` runs a chunk of new tokens for a batch of B equally long sequences
and carries `FlashState` (per KDA layer: conv window + recurrent state; per DSA layer: the
latent and indexer rows). Calling it on a whole prompt, on the prompt in chunks of any size, or
one token at a time gives the same logits (tests/inference/glm5_next/). `generate` is greedy
decoding over that. Module names follow transformers' Glm5NextTextModel so checkpoints load by
name (loader.py applies the on-disk renames).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from inference.forward_batch import ForwardBatch
from inference.glm5_next.config import Glm5NextTextConfig
from inference.glm5_next.dsa_attention import DsaAttention, DsaState
from inference.glm5_next.ffn import ClampedSwiGLU, FlashMoE
from inference.glm5_next.hyper_connection import HyperConnection
from inference.glm5_next.kda import KdaState, KimiDeltaAttention
from inference.glm5_next.paged_cache import FlashPagedCache
from inference.glm5_next.state_pool import FlashStatePool
from inference.glm5_next.vision import VisionConfig, VisionTower
from inference.layers.norm import RMSNorm


@dataclass
class FlashState:
    """Everything a batch of sequences carries between forward calls."""

    layers: list[KdaState | DsaState]
    length: int = 0  # tokens already processed (the same for every sequence of the batch)
    batch: int = 1

    @classmethod
    def new(cls, config: Glm5NextTextConfig, batch: int, device, dtype) -> FlashState:
        layers = [KdaState.zeros(config, batch, device) if config.is_kda(i) else DsaState.empty(config, batch, device, dtype)
                  for i in range(config.num_hidden_layers)]  # fmt: skip
        return cls(layers, 0, batch)


class FlashDecoderLayer(nn.Module):
    def __init__(self, config: Glm5NextTextConfig, layer: int):
        super().__init__()
        self.kda = config.is_kda(layer)
        self.self_attn = KimiDeltaAttention(config) if self.kda else DsaAttention(config, config.is_full_indexer(layer))
        if config.is_moe(layer):
            self.mlp = FlashMoE(config)
        else:
            self.mlp = ClampedSwiGLU(config.hidden_size, config.intermediate_size, config.swiglu_limit)
        self.input_layernorm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.post_attention_layernorm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.attn_hc = HyperConnection(config)
        self.ffn_hc = HyperConnection(config)

    def forward(self, streams, state, positions, shared_mask, lengths=None):
        post, comb, x = self.attn_hc(streams)
        x = self.input_layernorm(x)
        mask = None
        if self.kda:
            out = self.self_attn(x, state, lengths)
        else:
            out, mask = self.self_attn(x, state, positions, shared_mask, lengths)
        streams = HyperConnection.merge(post, comb, out, streams)
        post, comb, x = self.ffn_hc(streams)
        out = self.mlp(self.post_attention_layernorm(x))
        return HyperConnection.merge(post, comb, out, streams), mask


class Glm5NextTextModel(nn.Module):
    def __init__(self, config: Glm5NextTextConfig, vision: bool = False):
        super().__init__()
        self.embed_tokens = nn.Embedding(config.vocab_size, config.hidden_size)
        self.layers = nn.ModuleList(FlashDecoderLayer(config, i) for i in range(config.num_hidden_layers))
        self.norm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        if vision:  # stored as model.visual.* on disk, as here
            self.visual = VisionTower(VisionConfig.from_dict(config.vision_config or {}, config.hidden_size))


class Glm5NextForCausalLM(nn.Module):
    def __init__(self, config: Glm5NextTextConfig, vision: bool = False):
        super().__init__()
        self.config = config
        self.model = Glm5NextTextModel(config, vision)
        self.lm_head = nn.Linear(config.hidden_size, config.vocab_size, bias=False)
        if config.tie_word_embeddings:
            self.lm_head.weight = self.model.embed_tokens.weight

    @property
    def dtype(self) -> torch.dtype:
        return self.lm_head.weight.dtype

    @property
    def device(self) -> torch.device:
        return self.lm_head.weight.device

    def new_state(self, batch: int = 1) -> FlashState:
        return FlashState.new(self.config, batch, self.device, self.dtype)

    def set_kda_prefill_form(self, form: str) -> None:
        """"chunked" (default) or "recurrent" (per-token reference) for every KDA layer."""
        if form not in ("chunked", "recurrent"):
            raise ValueError(f"form={form!r}: expected 'chunked' or 'recurrent'")
        for layer in self.model.layers:
            if layer.kda:
                layer.self_attn.prefill_form = form

    @torch.inference_mode()
    def embed_images(self, pixel_values: torch.Tensor, image_grid_thw: torch.Tensor) -> torch.Tensor:
        """Processor output (patch rows, grid_thw) -> one embedding per image placeholder token."""
        if not hasattr(self.model, "visual"):
            raise ValueError("this model was loaded without a vision tower (no model.visual.* tensors)")
        return self.model.visual(pixel_values.to(self.dtype), image_grid_thw)

    def image_positions(self, input_ids: torch.Tensor) -> torch.Tensor:
        """Image placeholders: image_token_id outside <video start>...<video end> spans."""
        cfg = self.config
        in_video = (input_ids == cfg.video_start_token_id).cumsum(-1) > (input_ids == cfg.video_end_token_id).cumsum(-1)
        return (input_ids == cfg.image_token_id) & ~in_video

    @torch.inference_mode()
    def forward(self, input_ids: torch.Tensor, state: FlashState | None = None,
                image_embeds: torch.Tensor | None = None) -> torch.Tensor:
        """input_ids [B, T] (new tokens) -> logits [B, T, vocab]; `state` advances by T tokens.
        Without a state the tokens are a whole prompt starting at position 0. image_embeds
        [n, hidden] (embed_images) replace this chunk's image placeholders, in order."""
        if input_ids.dim() != 2:
            raise ValueError(f"input_ids: shape {tuple(input_ids.shape)}, expected [batch, seq_len]")
        b, t = input_ids.shape
        state = state if state is not None else self.new_state(b)
        if state.batch != b:
            raise ValueError(f"input_ids: batch {b}, but the state holds {state.batch} sequences")
        if state.length + t > self.config.max_position_embeddings:
            raise ValueError(f"sequence length {state.length + t} exceeds max_position_embeddings="
                             f"{self.config.max_position_embeddings}")
        positions = torch.arange(state.length, state.length + t, device=input_ids.device)
        h = self.model.embed_tokens(input_ids)
        if image_embeds is not None:
            where = self.image_positions(input_ids)
            if int(where.sum()) != image_embeds.shape[0]:
                raise ValueError(f"image_embeds: {image_embeds.shape[0]} rows for {int(where.sum())} image tokens")
            h = h.masked_scatter(where.unsqueeze(-1), image_embeds.to(h.dtype))
        streams = h.unsqueeze(2).expand(-1, -1, self.config.hc_mult, -1).contiguous()
        mask = None
        for layer, layer_state in zip(self.model.layers, state.layers):
            streams, new_mask = layer(streams, layer_state, positions, mask)
            mask = new_mask if not layer.kda else mask  # IndexShare: the last DSA selection
        state.length += t
        return self.lm_head(self.model.norm(streams.mean(dim=2)))

    def _ragged(self, ids: torch.Tensor, lengths: torch.Tensor, starts: torch.Tensor, kda_get, kda_put, dsa_view,
                embeds_at: tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None = None):
        """Right-padded rows ids [B, T] with `lengths` valid new tokens each, continuing at `starts`
        -> logits [B, T, vocab]. Padding leaves every state untouched (kda.py) and is never read.
        embeds_at (row, col, embeddings): inputs that replace the token embeddings there (images)."""
        b, t = ids.shape
        positions = starts.view(b, 1) + torch.arange(t, device=ids.device).view(1, t)
        h = self.model.embed_tokens(ids)
        if embeds_at is not None:
            row, col, values = embeds_at
            h[row, col] = values.to(h.dtype)
        streams = h.unsqueeze(2).expand(-1, -1, self.config.hc_mult, -1).contiguous()
        mask = None
        for i, layer in enumerate(self.model.layers):
            if layer.kda:
                state = kda_get(i)
                streams, _ = layer(streams, state, positions, None, lengths)
                kda_put(i, state)
            else:
                streams, mask = layer(streams, dsa_view(i), positions, mask, lengths)
        return self.lm_head(self.model.norm(streams.mean(dim=2)))

    @torch.inference_mode()
    def forward_slots(self, seqs: list[tuple[int, list[int]]], pool: FlashStatePool) -> list[torch.Tensor]:
        """A ragged batch: (slot, new tokens) per sequence, each continuing from its slot's length.
        -> logits [n_new, vocab] per sequence."""
        if not seqs:
            return []
        if any(not toks for _, toks in seqs):
            raise ValueError("forward_slots: every sequence needs at least one new token")
        dev = self.device
        slots = torch.tensor([s for s, _ in seqs], device=dev)
        lengths = torch.tensor([len(toks) for _, toks in seqs], device=dev)
        starts = pool.lengths[slots].clone()
        if int((starts + lengths).max()) > pool.max_len:
            raise ValueError(f"forward_slots: a sequence would exceed the pool's max_len={pool.max_len}")
        ids = torch.zeros(len(seqs), int(lengths.max()), dtype=torch.long, device=dev)
        for row, (_, toks) in enumerate(seqs):
            ids[row, : len(toks)] = torch.tensor(toks, device=dev)
        logits = self._ragged(ids, lengths, starts, lambda i: pool.kda.view(i, slots),
                              lambda i, st: pool.kda.write(i, slots, st), lambda i: pool.dsa_view(i, slots, starts, lengths))
        pool.lengths[slots] = starts + lengths
        return [logits[row, : len(toks)] for row, (_, toks) in enumerate(seqs)]

    @torch.inference_mode()
    def forward_batch(self, batch: ForwardBatch, cache: FlashPagedCache, slots: list[int],
                      image_rows: tuple[torch.Tensor, torch.Tensor] | None = None) -> torch.Tensor:
        """The engine's call: a flat ForwardBatch (tokens of many sequences, DSA rows through its
        block tables) with one KDA state slot per sequence -> logits [len(logits_indices), vocab].
        Each slot must hold the state after exactly seq_len - q_len tokens of its sequence.
        image_rows (flat token indices, embeddings): image embeddings that replace those tokens'."""
        qsl = batch.query_start_loc
        lengths = qsl[1:] - qsl[:-1]
        starts = batch.seq_lens - lengths
        if len(slots) != batch.num_seqs:
            raise ValueError(f"slots: {len(slots)} given for {batch.num_seqs} sequences")
        stale = [(s, cache.slot_lengths[s], int(p)) for s, p in zip(slots, starts.tolist()) if cache.slot_lengths[s] != p]
        if stale:
            s, have, want = stale[0]
            raise ValueError(f"slot {s}: its KDA state is at {have} tokens but the batch continues at {want}")
        b, t = batch.num_seqs, int(lengths.max())
        seq_of = torch.repeat_interleave(torch.arange(b, device=qsl.device), lengths)
        col = torch.arange(batch.num_tokens, device=qsl.device) - qsl[seq_of]
        ids = torch.zeros(b, t, dtype=torch.long, device=qsl.device)
        ids[seq_of, col] = batch.input_ids
        slot_t = torch.tensor(slots, device=qsl.device)
        embeds_at = None
        if image_rows is not None:
            flat, values = image_rows
            embeds_at = (seq_of[flat], col[flat], values)
        logits = self._ragged(ids, lengths, starts, lambda i: cache.kda.view(i, slot_t),
                              lambda i, st: cache.kda.write(i, slot_t, st),
                              lambda i: cache.dsa_view(i, batch.block_table, starts, lengths), embeds_at)
        for s, end in zip(slots, batch.seq_lens.tolist()):
            cache.slot_lengths[s] = end
        rows = batch.logits_indices
        return logits[seq_of[rows], col[rows]]

    def new_paged_cache(self, num_pages: int, page_size: int, slots: int, snapshots: int = 0) -> FlashPagedCache:
        return FlashPagedCache(self.config, num_pages, page_size, slots, self.device, self.dtype, snapshots)

    def new_state_pool(self, slots: int, max_len: int) -> FlashStatePool:
        return FlashStatePool(self.config, slots, max_len, self.device, self.dtype)

    @torch.inference_mode()
    def generate(self, input_ids: torch.Tensor, max_new_tokens: int, prefill_chunk: int | None = None) -> torch.Tensor:
        """Greedy decoding: prompt [B, T] -> generated tokens [B, max_new_tokens] (one step each)."""
        state = self.new_state(input_ids.shape[0])
        chunk = prefill_chunk or input_ids.shape[1]
        for start in range(0, input_ids.shape[1], chunk):
            logits = self(input_ids[:, start : start + chunk], state)
        out = []
        for _ in range(max_new_tokens):
            token = logits[:, -1].argmax(-1, keepdim=True)
            out.append(token)
            logits = self(token, state)
        return torch.cat(out, dim=1)
