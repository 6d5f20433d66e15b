"""Decode graphs: uniform steps replayed from fixed buffers (CUDA graphs; torch.compile on a CPU).

Decode steps, MTP verification (every sequence feeding 1 + k tokens) and MTP draft passes are
uniform steps (inference/static_step.py): B sequences x T tokens over W block-table columns. As
vLLM's CUDAGraphRunner and SGLang's cuda_graph_runner do, each is served at a bucket shape:

- batch buckets 1, 2, 4, 8, then multiples of 16, up to `max_batch`; width buckets `min_width`
  x 1, 2, 4, ... up to `max_width` pages. A step pads its batch with rows that write only into
  a reserved scratch page and its width with masked columns; bigger steps, prefill and mixed
  batches run through the general (eager) forward;
- inputs are staged into fixed device buffers with one host->device copy (decode_buffers.py),
  MTP hidden states and reused selections are gathered on the device into fixed buffers;
- "cuda_graphs": one graph per (signature, batch bucket, width bucket), all captured at start-up
  (largest first, one shared memory pool), replayed per step; results are copied, inside the
  graph, into output buffers outside the pool, so no graph's replay clobbers another's result;
- "compile" (the CPU form of the same path): the step functions through torch.compile
  (decode_compiler.py), traced at start-up with dynamic shapes; same buffers, buckets, padding;
- "eager": the same buffers and the same sync-free step functions, exact shapes, no padding.
  This is the engine's decode path when graphs are off.

NOTE: a step function must stay capture-safe: fixed shapes per (B, T, W), no data-dependent
Python control flow, no host sync (tests/inference/model/test_host_syncs.py counts them).
"""

from __future__ import annotations

import logging
from collections import Counter
from dataclasses import dataclass
from typing import NamedTuple

import torch

from inference.decode_compiler import StepCompiler
from inference.engine.decode_buffers import DecodeBuffers, StepShape
from inference.engine.model_runner import resolve_future_ids
from inference.layers.indexer import TopkSelection
from inference.model import DraftSelection, ModelOutput
from inference.static_step import StepInputs

log = logging.getLogger(__name__)
MODES = ("eager", "compile", "cuda_graphs")


@dataclass(frozen=True)
class GraphSettings:
    """What a runner serves as uniform steps (picklable: tensor-parallel followers get the same)."""

    mode: str  # one of MODES
    max_batch: int  # largest batch bucket (eager: largest batch taken)
    min_width: int  # block-table columns of the narrowest step: S = min_width * page_size > index_topk
    max_width: int  # columns of the widest (pages of the longest sequence)
    target_tokens: tuple[int, ...] = (1,)  # T of target steps served (1, and 1 + k with MTP)
    mtp_tokens: tuple[int, ...] = ()  # T of MTP passes served (none without MTP)
    share_selection: bool = False  # MTP draft passes that reuse the first draft's selection
    keep_hidden: bool = False  # target steps return every hidden state (MTP needs them)
    pad_page: int | None = None  # the scratch page padding rows write into (not needed eagerly)

    @classmethod
    def build(cls, model_config, mode: str, max_batch: int, max_sequence: int, page_size: int,
              num_draft: int = 0, pad_page: int | None = None) -> GraphSettings:  # fmt: skip
        if mode not in MODES:
            raise ValueError(f"decode graphs: mode={mode!r}, expected one of {MODES}")
        if mode != "eager" and pad_page is None:
            raise ValueError(f"decode graphs: mode {mode!r} pads batches and needs a scratch pad_page")
        min_width = max(2, -(-(model_config.index_topk + 1) // page_size))
        max_width = max(min_width, -(-(max_sequence + num_draft) // page_size))  # (drafts sit past the end)
        mtp = num_draft > 0
        # With MTP a target step feeds 1 + k tokens; one without drafts (a sequence at its end) is
        # rare and runs eagerly. MTP passes catch up over 1 token (no draft accepted) or 1 + k (all).
        return cls(mode, max_batch, min_width, max_width, (1 + num_draft,) if mtp else (1,),
                   (1, 1 + num_draft) if mtp else (), mtp and model_config.index_share_for_mtp_iteration,
                   mtp, pad_page)  # fmt: skip


def batch_buckets(max_batch: int) -> list[int]:
    sizes = [b for b in (1, 2, 4, 8) if b < max_batch] + list(range(16, max_batch, 16))
    return sizes + [max_batch]


def width_buckets(min_width: int, max_width: int) -> list[int]:
    sizes, w = [], min_width
    while w < max_width:
        sizes.append(w)
        w *= 2
    return sizes + [max_width]


class Signature(NamedTuple):
    kind: str  # "target" or "mtp"
    tokens: int  # T
    reuse: bool  # an MTP pass over a reused selection


class StepResult(NamedTuple):
    logits: torch.Tensor | None  # target: [B*T, V]; mtp: [B, V]; None on a tensor-parallel follower
    hidden: torch.Tensor  # target: final-normed [B*T, H]; mtp: pre-norm [B, H] at the last tokens
    selection: TopkSelection | torch.Tensor | None  # mtp: the last tokens' selection (None when reused)


def _rows(x, n: int):
    if x is None:
        return None
    if isinstance(x, TopkSelection):
        return TopkSelection(x.positions[:n], x.valid[:n])
    return x[:n]


def _copy_rows(dst, src) -> None:
    if isinstance(dst, TopkSelection):
        dst.positions.copy_(src.positions)
        dst.valid.copy_(src.valid)
    else:
        dst.copy_(src)


class DecodeGraphs:
    def __init__(self, model, cache, settings: GraphSettings):
        if model.parallel.dp is not None:
            raise ValueError("decode graphs: not with DP attention (its token exchange is sized on the host)")
        if settings.mode == "compile" and model.parallel.world > 1:
            raise ValueError(f"decode graphs: torch.compile cannot trace the in-place collectives of "
                             f"{model.parallel.world} ranks (CUDA graphs with NCCL can; or run eagerly)")
        if settings.mode == "cuda_graphs" and cache.device.type != "cuda":
            raise ValueError(f"decode graphs: mode 'cuda_graphs' needs a CUDA cache, this one is on {cache.device}")
        self.model, self.cache, self.settings = model, cache, settings
        cfg, s = model.config, settings
        self.signatures = [Signature("target", t, False) for t in s.target_tokens]
        self.signatures += [Signature("mtp", t, False) for t in s.mtp_tokens]
        if s.share_selection:
            self.signatures.append(Signature("mtp", 1, True))
        self.max_tokens = max(s.target_tokens + s.mtp_tokens)
        device = cache.device
        self.batches = batch_buckets(s.max_batch) if s.mode != "eager" else None
        if s.mode == "compile":  # a traced batch of 1 would be a graph of its own: pad it to 2
            self.batches = sorted({max(2, b) for b in self.batches})
        self.max_rows = self.batches[-1] if self.batches else s.max_batch  # sequences a step may hold
        self.buffers = DecodeBuffers(self.max_rows, self.max_tokens, s.max_width, device)
        self.widths = width_buckets(s.min_width, s.max_width)
        self.kernels = model._kernels(cache.latent[0])
        model.rope_frequencies(device)  # now: a traced step must not find it missing
        rows = self.max_rows * self.max_tokens
        self.prev_hidden = torch.zeros(rows, cfg.hidden_size, dtype=model.dtype, device=device) if s.mtp_tokens else None
        self.reuse = self._selection_buffer(self.max_rows) if s.share_selection else None
        self.outputs: dict[str, StepResult] = self._output_buffers() if s.mode == "cuda_graphs" else {}
        self.compilers = {"target": StepCompiler(model.step_forward),
                          "mtp": StepCompiler(model.mtp_step_forward)} if s.mode == "compile" else {}  # fmt: skip
        self.graphs: dict[tuple[Signature, StepShape], torch.cuda.CUDAGraph] = {}
        self._pool = None
        self._logits_here = model.parallel.rank == 0  # only the leader gets logits
        self.failure: str | None = None  # why graphs stopped (capture failed), if they did
        self.steps: Counter = Counter()  # uniform steps run, by signature kind (tests read it)

    def _output_buffers(self) -> dict[str, StepResult]:
        """Where captured graphs leave their results: outside the graphs' pool, shared by every shape."""
        cfg, dev, dtype, b = self.model.config, self.cache.device, self.model.dtype, self.max_rows
        rows, v, h = b * self.max_tokens, cfg.vocab_size, cfg.hidden_size
        out = {"target": StepResult(torch.empty(rows, v, dtype=dtype, device=dev),
                                    torch.empty(rows, h, dtype=dtype, device=dev), None)}  # fmt: skip
        if self.settings.mtp_tokens:
            out["mtp"] = StepResult(torch.empty(b, v, dtype=dtype, device=dev), torch.empty(b, h, dtype=dtype, device=dev),
                                    self._selection_buffer(b))  # fmt: skip
        return out

    def _selection_buffer(self, rows: int):
        k, dev = self.model.config.index_topk, self.cache.device
        if self.kernels is not None:
            return torch.zeros(rows, k, dtype=torch.int32, device=dev)
        valid = torch.zeros(rows, 1, k, dtype=torch.bool, device=dev)
        valid[..., 0] = True  # a padding row attends to one key
        return TopkSelection(torch.zeros(rows, 1, k, dtype=torch.long, device=dev), valid)

    @property
    def mode(self) -> str:
        return self.settings.mode if self.failure is None else "eager"

    def describe(self) -> str:
        s = self.settings
        if s.mode == "eager":
            return "decode eager (uniform steps, no host sync)"
        if self.failure is not None:
            return f"decode eager, graphs failed: {self.failure}"
        built = len(self.graphs) if s.mode == "cuda_graphs" else "compiled"
        return f"decode graphs ({s.mode}: {built}; batch <= {s.max_batch}, {len(self.widths)} widths)"

    # ---- shapes ----
    def shape_for(self, batch: int, tokens: int, pages: int) -> StepShape | None:
        s = self.settings
        if self.batches is None:
            width = max(s.min_width, pages)
            return StepShape(batch, tokens, width) if batch <= s.max_batch and width <= s.max_width else None
        b = next((x for x in self.batches if x >= batch), None)
        w = next((x for x in self.widths if x >= pages), None)
        return None if b is None or w is None else StepShape(b, tokens, w)

    # ---- the runner's entry points: None = not a uniform step this runner serves ----
    @torch.inference_mode()
    def target(self, tokens: list[list[int]], starts: list[int], pages: list[list[int]], num_logit_rows: int,
               want_hidden: bool, future: torch.Tensor | None = None) -> ModelOutput | None:  # fmt: skip
        """`future`: the tokens that negative ids name (model_runner.resolve_future_ids)."""
        t = len(tokens[0]) if tokens else 0
        sig = Signature("target", t, False)
        n = len(tokens) * t
        if sig not in self.signatures or any(len(x) != t for x in tokens) or num_logit_rows != n:
            return None
        if want_hidden and not self.settings.keep_hidden:
            return None
        shape = self.shape_for(len(tokens), t, self._pages(starts, t))
        if shape is None:
            return None
        self.buffers.stage(shape, tokens, starts, pages, self._pad)
        if future is not None:  # outside any graph: the staged ids are fixed up in place
            ids = self.buffers.views(shape).input_ids
            ids.copy_(resolve_future_ids(ids, future))
        res = self._run(sig, shape)
        self.steps["target"] += 1
        hidden = res.hidden[:n]
        return ModelOutput(hidden, _rows(res.logits, n), hidden if want_hidden else None)

    @torch.inference_mode()
    def mtp(self, spans, reuse_rows: list[int] | None, target_hidden, mtp_hidden, draft: DraftSelection | None):
        t = len(spans[0].next_ids) if spans else 0
        sig = Signature("mtp", t, reuse_rows is not None)
        if sig not in self.signatures or any(len(s.next_ids) != t or s.hidden.count != t for s in spans):
            return None
        source = {s.hidden.source for s in spans}
        if len(source) != 1 or (sig.reuse and draft is None):
            return None
        shape = self.shape_for(len(spans), t, self._pages([s.start for s in spans], t))
        if shape is None:
            return None
        self.buffers.stage(shape, [s.next_ids for s in spans], [s.start for s in spans], [s.pages for s in spans],
                           self._pad, [s.hidden.row for s in spans], reuse_rows)  # fmt: skip
        src = target_hidden if source == {"target"} else mtp_hidden
        rows = shape.batch * t
        torch.index_select(src, 0, self.buffers.hidden_rows(shape), out=self.prev_hidden[:rows])
        if sig.reuse:
            idx = self.buffers.reuse_rows(shape)
            chosen = draft.rows
            if isinstance(chosen, TopkSelection):
                chosen = TopkSelection(chosen.positions.index_select(0, idx), chosen.valid.index_select(0, idx))
            else:
                chosen = chosen.index_select(0, idx)
            _copy_rows(_rows(self.reuse, shape.batch), chosen)
        res = self._run(sig, shape)
        self.steps["mtp"] += 1
        b = len(spans)
        selection = None if res.selection is None else DraftSelection(_rows(res.selection, b))
        return ModelOutput(res.hidden[:b], _rows(res.logits, b), None, selection)

    @property
    def _pad(self) -> int:
        return self.settings.pad_page if self.settings.pad_page is not None else 0

    def _pages(self, starts: list[int], t: int) -> int:
        return -(-(max(starts) + t) // self.cache.page_size)

    # ---- running a step ----
    def _inputs(self, sig: Signature, shape: StepShape) -> StepInputs:
        step = self.buffers.views(shape)
        if sig.kind == "mtp":
            step.prev_hidden = self.prev_hidden[: shape.batch * shape.tokens]
            step.reuse = _rows(self.reuse, shape.batch) if sig.reuse else None
        return step

    def _call(self, sig: Signature, step: StepInputs) -> StepResult:
        if sig.kind == "target":
            fn = self.compilers.get("target") or self.model.step_forward
            logits, hidden = fn(step, self.cache)
            return StepResult(logits, hidden, None)
        fn = self.compilers.get("mtp") or self.model.mtp_step_forward
        return StepResult(*fn(step, self.cache))

    def _run(self, sig: Signature, shape: StepShape) -> StepResult:
        if self.mode == "cuda_graphs":
            graph = self.graphs.get((sig, shape))
            if graph is None:  # (every shape is captured at start-up; a step never waits for one)
                return self._call(sig, self._inputs(sig, shape))
            graph.replay()
            return self._static_result(sig, shape)
        return self._call(sig, self._inputs(sig, shape))

    def _static_result(self, sig: Signature, shape: StepShape) -> StepResult:
        out = self.outputs[sig.kind]
        n = shape.batch * shape.tokens if sig.kind == "target" else shape.batch
        logits = out.logits[:n] if self._logits_here else None
        return StepResult(logits, out.hidden[:n], None if sig.reuse else _rows(out.selection, n))

    def _write_outputs(self, sig: Signature, shape: StepShape, res: StepResult) -> None:
        static = self._static_result(sig, shape)
        if res.logits is not None:
            static.logits.copy_(res.logits)
        static.hidden.copy_(res.hidden)
        if static.selection is not None and res.selection is not None:
            _copy_rows(static.selection, res.selection)

    # ---- start-up ----
    @torch.inference_mode()
    def prepare(self) -> int:
        """Build the graphs now, on padding rows only (they write just the scratch page), so no
        request waits for a capture or a compile. CUDA graphs: every signature x batch bucket x
        width bucket, largest first so later captures reuse the pool; compile: each signature
        at the largest and the smallest bucket (one graph per signature covers every bucket and
        width). Returns how many steps it ran; eager mode builds nothing."""
        if self.settings.mode == "eager":
            return 0
        if self.settings.mode == "compile":
            # NOTE: the largest batch first, then the smallest: both must hit the one graph traced.
            shapes = [(sig, StepShape(b, sig.tokens, self.widths[0])) for b in dict.fromkeys((self.batches[-1], 2))
                      for sig in self.signatures]  # fmt: skip
            for sig, shape in shapes:
                self.buffers.stage(shape, [], [], [], self._pad, [], [])
                self._call(sig, self._inputs(sig, shape))
            return len(shapes)
        shapes = [(sig, StepShape(b, sig.tokens, w)) for sig in self.signatures
                  for b in reversed(self.batches) for w in reversed(self.widths)]  # fmt: skip
        try:
            for sig, shape in shapes:
                self.capture(sig, shape)
        except Exception as exc:  # a capture-unsafe op (a host sync), or out of memory
            self.graphs.clear()
            self.failure = " ".join(f"{type(exc).__name__}: {exc}".split())[:500]
            log.warning("decode graphs: capturing failed, decode runs eagerly (%s)", self.failure)
        return len(self.graphs)

    def capture(self, sig: Signature, shape: StepShape) -> None:
        """Capture one CUDA graph (prepare() captures them all; benchmarks pick the ones they time)."""
        self.buffers.stage(shape, [], [], [], self._pad, [], [])
        step = self._inputs(sig, shape)
        warm = torch.cuda.Stream()
        warm.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(warm):  # compiles the Triton kernels and settles the allocator
            self._write_outputs(sig, shape, self._call(sig, step))
        torch.cuda.current_stream().wait_stream(warm)
        graph = torch.cuda.CUDAGraph()
        if self._pool is None:
            self._pool = torch.cuda.graph_pool_handle()
        with torch.cuda.graph(graph, pool=self._pool, capture_error_mode="thread_local"):
            self._write_outputs(sig, shape, self._call(sig, step))
        self.graphs[(sig, shape)] = graph
