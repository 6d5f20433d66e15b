"""GLM-5.x causal LM (`GlmMoeDsaForCausalLM`) over a paged KV cache.

`forward_batch` is the engine's hot path: a flat batch of new tokens from many sequences writes
its KV into the cache pages and attends over positions 0..seq_len-1 of each sequence.
`mtp_forward` runs the draft layer; `model(input_ids)` is a cache-less convenience over the same
modules (it builds a throw-away cache of one page per sequence).

IndexShare: the selection of the most recent "full" layer is reused by the "shared" layers that
follow it, for the same tokens of the same step.

Tensor/expert parallelism (`parallel`, inference/parallel/): the same code on every rank over its
shards; the embedding and LM head are vocab-parallel and only the leader gets logits (None on
followers, which never sample). DP attention (parallel/dp_attention.py): each rank runs its own
sequences; with split extras (parallel/dp_extras.py) the leader gets every rank's logit rows.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from inference.config import ModelConfig
from inference.forward_batch import AttentionMetadata, ForwardBatch
from inference.kv_cache import PagedKVCache
from inference.layers.decoder import DecoderLayer
from inference.layers.fusion import column_major
from inference.layers.indexer import TopkSelection
from inference.layers.mtp import MTPLayer
from inference.layers.norm import RMSNorm
from inference.layers.rope import RopeTables, inverse_frequencies
from inference.parallel.dp_extras import DPLMHead, DPVocabEmbedding
from inference.parallel.state import ParallelState
from inference.parallel.vocab import ParallelLMHead, VocabParallelEmbedding
from inference.static_step import StepInputs, uniform_metadata


@dataclass
class ModelOutput:
    hidden_states: torch.Tensor  # [M, H] for batch.logits_indices (target: after model.norm)
    # [M, vocab]; None on a tensor-parallel follower (only the leader samples). DP attention with
    # split extras: on the leader every rank's logit rows, rank after rank; None elsewhere.
    logits: torch.Tensor | None
    all_hidden_states: torch.Tensor | None = None  # [N, H] when asked for (MTP prefill needs every row)
    # mtp_forward: each sequence's selection at its last row, for later draft steps to reuse
    # (index_share_for_mtp_iteration; pick sequences with `sequences_of`). None: all keys visible.
    draft_selection: DraftSelection | None = None


@dataclass
class DraftSelection:
    """One selection row per sequence of an MTP pass: TopkSelection [B, 1, K] on the native path,
    cache slots [B, K] through the kernels."""

    rows: TopkSelection | torch.Tensor

    @classmethod
    def last_rows(cls, selection: TopkSelection | torch.Tensor, batch: ForwardBatch) -> DraftSelection:
        if isinstance(selection, TopkSelection):  # padded [B, T, K] layout: row q_len - 1
            q_lens = batch.query_start_loc[1:] - batch.query_start_loc[:-1]
            seqs = torch.arange(batch.num_seqs, device=q_lens.device)
            pos, valid = selection.positions[seqs, q_lens - 1], selection.valid[seqs, q_lens - 1]
            return cls(TopkSelection(pos.unsqueeze(1), valid.unsqueeze(1)))
        return cls(selection[batch.query_start_loc[1:] - 1])  # flat [N, K]: each sequence's last token

    def sequences_of(self, index: list[int]) -> TopkSelection | torch.Tensor:
        """The selection for a one-token-per-sequence step over these sequences, in this order."""
        idx = torch.tensor(index, dtype=torch.long, device=self._device)
        if isinstance(self.rows, TopkSelection):
            return TopkSelection(self.rows.positions[idx], self.rows.valid[idx])
        return self.rows[idx]

    @property
    def _device(self) -> torch.device:
        return (self.rows.positions if isinstance(self.rows, TopkSelection) else self.rows).device


class Glm5Model(nn.Module):
    def __init__(self, config: ModelConfig, parallel: ParallelState):
        super().__init__()
        if parallel.tp > 1:
            self.embed_tokens = VocabParallelEmbedding(config.vocab_size, config.hidden_size, parallel)
        elif parallel.dp_split_extras:
            self.embed_tokens = DPVocabEmbedding(config.vocab_size, config.hidden_size, parallel)
        else:
            self.embed_tokens = nn.Embedding(config.vocab_size, config.hidden_size)
        layers: list[nn.Module] = [DecoderLayer(config, i, parallel) for i in range(config.num_hidden_layers)]
        layers += [MTPLayer(config, config.num_hidden_layers + i, parallel) for i in range(config.num_mtp_layers)]
        self.layers = nn.ModuleList(layers)
        self.norm = RMSNorm(config.hidden_size, config.rms_norm_eps)


class Glm5ForCausalLM(nn.Module):
    def __init__(self, config: ModelConfig, parallel: ParallelState | None = None):
        super().__init__()
        from inference.parallel.shard import validate_layout

        self.config = config
        self.parallel = parallel or ParallelState.single()
        validate_layout(config, self.parallel)
        self.model = Glm5Model(config, self.parallel)
        if self.parallel.tp > 1:
            self.lm_head = ParallelLMHead(config.hidden_size, config.vocab_size, self.parallel)
        elif self.parallel.dp_split_extras:
            self.lm_head = DPLMHead(config.hidden_size, config.vocab_size, self.parallel)
        else:
            self.lm_head = nn.Linear(config.hidden_size, config.vocab_size, bias=False)
        # "auto" picks absorbed MLA for short per-sequence chunks (decode) and expanded otherwise.
        self.attention_mode = "auto"
        # Sparse attention / MoE through the `kernels` package: "auto" = on CUDA only (Triton),
        # "torch" / "triton" = always with that backend, None = never (native torch path).
        self.kernel_backend: str | None = "auto"
        self._inv_freq: torch.Tensor | None = None

    @property
    def dtype(self) -> torch.dtype:
        return self.lm_head.weight.dtype

    @property
    def device(self) -> torch.device:
        return self.lm_head.weight.device

    def fuse_weights(self) -> None:
        """Prepare loaded weights for inference; the loader calls this once they are in place.

        Linears that share an input become one GEMM (the originals are views, no extra memory),
        and the rows producing RoPE slices are de-interleaved (layers/rope.py). Afterwards
        state_dict() holds those permuted rows: it is not a checkpoint to save and reload."""
        for module in self.modules():
            if module is not self and hasattr(module, "fuse"):
                module.fuse()
        tied = self.lm_head.weight is self.model.embed_tokens.weight
        if self.device.type == "cpu" and not tied:
            self.lm_head.weight = column_major(self.lm_head.weight)

    def rope_frequencies(self, device: torch.device) -> torch.Tensor:
        """RoPE's inverse frequencies, computed once (decode graphs ask before they trace a step)."""
        if self._inv_freq is None or self._inv_freq.device != device:
            self._inv_freq = inverse_frequencies(self.config.qk_rope_head_dim, self.config.rope_theta, device)
        return self._inv_freq

    def _prepare(self, batch: ForwardBatch, cache: PagedKVCache) -> tuple[AttentionMetadata, RopeTables]:
        meta = AttentionMetadata.from_batch(batch, cache.page_size, masks=self._kernels(batch.input_ids) is None)
        rope = RopeTables.build(batch.positions, self.config.qk_rope_head_dim, self.config.rope_theta, self.dtype,
                                self.rope_frequencies(batch.positions.device))  # fmt: skip
        return meta, rope

    def _run_layer(self, layer: DecoderLayer, h, rope, meta, cache: PagedKVCache, selection, reuse: bool = False):
        i = layer.layer
        indexer_cache = cache.indexer_rows(i) if i in cache.indexer else None
        return layer(
            h, rope, meta, cache.latent_rows(i), indexer_cache, selection, self.attention_mode, self._kernels(h), reuse
        )  # fmt: skip

    def _kernels(self, h: torch.Tensor) -> str | None:
        backend = self.kernel_backend
        if backend is None or (backend == "auto" and h.device.type != "cuda"):
            return None
        return backend

    def _layer_stack(self, input_ids, logits_indices, meta: AttentionMetadata, rope: RopeTables, cache: PagedKVCache,
                     return_all_hidden: bool):  # fmt: skip
        h = self.model.embed_tokens(input_ids)
        selection = None
        for layer in self.model.layers[: self.config.num_hidden_layers]:
            h, selection = self._run_layer(layer, h, rope, meta, cache, selection)
        h = self.model.norm(h)
        picked = h[logits_indices]
        return picked, self.lm_head(picked), (h if return_all_hidden else None)

    # ---- uniform steps from fixed-shape device tensors (static_step.py): no host sync ----
    def _prepare_step(self, step: StepInputs, cache: PagedKVCache) -> tuple[AttentionMetadata, RopeTables]:
        if self.parallel.dp is not None:
            raise ValueError("uniform steps: not with DP attention (its token exchange is sized on the host)")
        meta = uniform_metadata(step, cache.page_size, masks=self._kernels(step.input_ids) is None)
        rope = RopeTables.build(step.positions, self.config.qk_rope_head_dim, self.config.rope_theta, self.dtype,
                                self.rope_frequencies(step.positions.device))  # fmt: skip
        return meta, rope

    def step_forward(self, step: StepInputs, cache: PagedKVCache) -> tuple[torch.Tensor | None, torch.Tensor]:
        """A uniform target step (decode, MTP verification): (logits [B*T, V] of every new token,
        None on a tensor-parallel follower; the final-normed hidden states [B*T, H])."""
        meta, rope = self._prepare_step(step, cache)
        h = self.model.embed_tokens(step.input_ids)
        selection = None
        for layer in self.model.layers[: self.config.num_hidden_layers]:
            h, selection = self._run_layer(layer, h, rope, meta, cache, selection)
        h = self.model.norm(h)
        return self.lm_head(h), h

    def mtp_step_forward(self, step: StepInputs, cache: PagedKVCache):
        """A uniform MTP pass (step.prev_hidden set; step.reuse to attend over an earlier pass's
        selection): (logits [B, V] and pre-norm hidden [B, H] at each sequence's last new token,
        that token's selection for later passes to reuse, or None when step.reuse was given)."""
        meta, rope = self._prepare_step(step, cache)
        mtp: MTPLayer = self.model.layers[self.config.num_hidden_layers]
        u = mtp.combine(self.model.embed_tokens(step.input_ids), step.prev_hidden.to(self.dtype))
        reuse = step.reuse is not None
        z, selection = self._run_layer(mtp, u, rope, meta, cache, step.reuse, reuse)
        last = step.last_rows()
        picked = z.index_select(0, last)
        logits = self.lm_head(mtp.shared_head.norm(picked))
        if reuse or selection is None:
            return logits, picked, None
        if isinstance(selection, TopkSelection):  # padded [B, T, K]: row T - 1
            t = step.tokens_per_seq
            return logits, picked, TopkSelection(selection.positions[:, t - 1 : t], selection.valid[:, t - 1 : t])
        return logits, picked, selection.index_select(0, last)

    @torch.inference_mode()
    def idle_forward(self, mtp: bool = False) -> torch.Tensor | None:
        """DP attention: this rank has no tokens this step but still joins every exchange of the
        target stack or the MTP layer: each MoE layer's (its experts serve the other ranks' tokens)
        and, with split extras, the embedding's, the dense MLPs' and the LM head's. Returns the LM
        head's output there (on the leader, every rank's logit rows), else None."""
        dp = self.parallel.dp
        dp.begin(0, self.device)
        layers = self.model.layers[self.config.num_hidden_layers:] if mtp else self.model.layers[: self.config.num_hidden_layers]
        empty = torch.empty(0, self.config.hidden_size, dtype=self.dtype, device=self.device)
        split = self.parallel.dp_split_extras
        if split:
            self.model.embed_tokens(torch.empty(0, dtype=torch.long, device=self.device))
        for layer in layers:
            if hasattr(layer.mlp, "gate"):  # MoE
                layer.mlp(empty, self._kernels(empty))
            elif split:  # a dense MLP split over the ranks
                layer.mlp(empty)
        return self.lm_head(empty) if split else None

    @torch.inference_mode()
    def forward_batch(self, batch: ForwardBatch, cache: PagedKVCache, return_all_hidden: bool = False) -> ModelOutput:
        if self.parallel.dp is not None:
            self.parallel.dp.begin(batch.num_tokens, self.device, batch.logits_indices.numel())
        meta, rope = self._prepare(batch, cache)
        picked, logits, h = self._layer_stack(batch.input_ids, batch.logits_indices, meta, rope, cache, return_all_hidden)
        return ModelOutput(picked, logits, h)

    @torch.inference_mode()
    def mtp_forward(
        self, batch: ForwardBatch, prev_hidden: torch.Tensor, cache: PagedKVCache, return_all_hidden: bool = False,
        reuse_selection: TopkSelection | torch.Tensor | None = None,
    ) -> ModelOutput:
        """Draft step: batch.input_ids are the NEXT tokens (t_{p+1}) at positions p, prev_hidden [N, H]
        the target's hidden states at p. Returns the MTP block output before shared_head.norm as
        hidden_states (vLLM feeds that pre-norm state to the next draft step).

        reuse_selection (one token per sequence): attend over an earlier draft step's selection
        (`ModelOutput.draft_selection.sequences_of(...)`) instead of running the MTP indexer, as
        checkpoints with index_share_for_mtp_iteration (GLM-5.2/5.3) are served. The indexer keys
        of such a step's positions are not written: every position a draft step reads keys at is
        rewritten by the MTP pass that catches up on verified tokens first."""
        if self.config.num_mtp_layers == 0:
            raise RuntimeError("this checkpoint has no MTP layer (num_nextn_predict_layers=0)")
        if prev_hidden.shape != (batch.num_tokens, self.config.hidden_size):
            raise ValueError(
                f"prev_hidden: shape {tuple(prev_hidden.shape)}, expected ({batch.num_tokens}, {self.config.hidden_size})"
            )
        if self.parallel.dp is not None:
            self.parallel.dp.begin(batch.num_tokens, self.device, batch.logits_indices.numel())
        meta, rope = self._prepare(batch, cache)
        mtp: MTPLayer = self.model.layers[self.config.num_hidden_layers]
        u = mtp.combine(self.model.embed_tokens(batch.input_ids), prev_hidden.to(self.dtype))
        reuse = reuse_selection is not None
        if reuse and batch.num_tokens != batch.num_seqs:
            raise ValueError("reuse_selection: only for steps of one new token per sequence")
        z, selection = self._run_layer(mtp, u, rope, meta, cache, reuse_selection, reuse)
        picked = z[batch.logits_indices]
        logits = self.lm_head(mtp.shared_head.norm(picked))
        drafts = None if selection is None or reuse else DraftSelection.last_rows(selection, batch)
        return ModelOutput(picked, logits, z if return_all_hidden else None, drafts)

    def new_cache(self, num_pages: int, page_size: int, kv_cache_dtype: str = "auto") -> PagedKVCache:
        """kv_cache_dtype: "auto" (the model dtype) or "fp8" (fp8_ds_mla latent + FP8 indexer keys)."""
        return PagedKVCache(self.config, num_pages, page_size, self.dtype, self.device, kv_cache_dtype)

    @torch.inference_mode()
    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        """input_ids [B, T] -> logits [B, T, vocab], every sequence starting at position 0."""
        if input_ids.dim() != 2:
            raise ValueError(f"input_ids: shape {tuple(input_ids.shape)}, expected [batch, seq_len]")
        b, t = input_ids.shape
        cache = self.new_cache(num_pages=b, page_size=t)
        dev = input_ids.device
        batch = ForwardBatch(
            input_ids=input_ids.reshape(-1),
            positions=torch.arange(t, device=dev).repeat(b),
            query_start_loc=torch.arange(b + 1, device=dev) * t,
            seq_lens=torch.full((b,), t, device=dev),
            block_table=torch.arange(b, device=dev).view(b, 1),
            logits_indices=torch.arange(b * t, device=dev),
        )
        logits = self.forward_batch(batch, cache).logits
        return None if logits is None else logits[: b * t].view(b, t, -1)  # (DP split extras: rank 0's rows first)
