"""torch.compile for decode steps: one graph for the whole layer stack, eager everything else.

A decode step at small batch does little arithmetic per op, so on CPU most of an eager step is
per-op dispatch and Python (measured: ~960 aten calls per small-preset step, ~4 ms of ~13 ms).
Compiling the layer stack fuses the norms, RoPE, routing and masking into a few generated kernels
and leaves the matmuls to the same BLAS calls as eager mode.

What is compiled, and why only that:
- batch-1 decode steps (one sequence, one new token: the interactive case): their shapes vary only
  in the context length, traced as a symbolic size, so a process compiles two graphs (context up
  to `index_topk` keys and beyond), not one per step. Prefill chunks and MTP verification (chunked
  loops over several tokens) stay eager, where arithmetic dominates anyway. Batched decode stays
  eager too: its MoE groups tokens by expert with data-dependent sizes (`grouped_mm`, which torch
  cannot trace in fp32, or a loop over the experts that received tokens);
- the native torch path only: with the Triton kernels (CUDA) the step is already a few large
  kernels and CUDA graphs, not this, would be the next step.

NOTE: the first step of each new shape class pays the compile (tens of seconds on CPU; the
compiled code is cached on disk by inductor, so a restarted process pays far less). Batch-1
decode traces the MoE's expert ids as symbolic ints (`capture_scalar_outputs`), which keeps each
expert a GEMV on a view of its weights instead of a gather.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import torch

from inference.forward_batch import AttentionMetadata

log = logging.getLogger(__name__)
# What a failed compile raises (a backend or C++ compiler error arrives as BackendCompilerFailed).
COMPILE_FAILURES = (torch._dynamo.exc.TorchDynamoException, torch._dynamo.exc.FailOnRecompileLimitHit)


class DecodeCompiler:
    """Wraps the model's layer-stack function; `applies` says whether a step should use it.

    NOTE: a step whose compile fails (no C++ compiler, an unsupported op, dynamo's per-function
    graph limit reached, which would otherwise run the code eagerly without saying so) runs
    eagerly instead and compiling stops for good, with one warning: a missing toolchain costs
    speed, never a request. Rerunning the step eagerly is safe even if the compiled graph had
    started: a step's cache writes are plain overwrites of its own slots. Any other error is the
    step's own and propagates as in eager mode."""

    def __init__(self, stack: Callable[..., Any], backend: str | Callable = "inductor"):
        self._eager = stack
        self._compiled: Callable[..., Any] | None = torch.compile(stack, dynamic=True, backend=backend)
        self.calls = 0  # compiled steps run (tests and benchmarks read it)
        self.failure: str | None = None  # why compiling stopped, if it did

    def applies(self, meta: AttentionMetadata, kernels: str | None) -> bool:
        return (self._compiled is not None and kernels is None and meta.max_query_len == 1
                and meta.seq_lens.shape[0] == 1)  # fmt: skip

    def __call__(self, *args: Any) -> Any:
        try:
            with torch._dynamo.config.patch(capture_scalar_outputs=True, fail_on_recompile_limit_hit=True):
                out = self._compiled(*args)
        except COMPILE_FAILURES as exc:
            self._compiled = None
            root = exc
            while root.__cause__ is not None:  # torch wraps the backend's own error
                root = root.__cause__
            self.failure = " ".join(f"{type(root).__name__}: {root}".split())[:500]
            log.warning("compile_decode: compiling the decode step failed, running it eagerly from now on (%s)",
                        self.failure)
            return self._eager(*args)
        self.calls += 1
        return out
