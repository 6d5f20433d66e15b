"""torch.compile for uniform steps: what a decode graph is on a CPU (inference/engine/decode_graphs.py).

A decode step at small batch does little arithmetic per op, so on CPU most of an eager step is
per-op dispatch and Python (measured: ~960 aten calls per small-preset step, ~4 ms of ~13 ms).
Compiling the whole step (metadata, every layer, the head) fuses the norms, RoPE, routing and
masking into a few generated kernels and leaves the matmuls to the same BLAS calls as eager mode.

Batch and width are traced as symbolic sizes (`dynamic=True`), so a step function compiles one
graph per T (and per MTP pass kind), not one per batch bucket or context length. Dynamo would
specialize a size of 1, so compiled steps start at a batch of 2 (decode_graphs.py pads a single
sequence). The MoE runs one GEMM per expert over symbolic slices of the expert-sorted rows
(`capture_scalar_outputs`; grouped_mm cannot be traced in fp32).

NOTE: the first step of each graph pays the compile (tens of seconds on CPU; inductor caches the
generated code on disk, so a restarted process pays far less); the engine does it at start-up.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable
from typing import Any

import torch
import torch.fx.experimental._config as fx_config

log = logging.getLogger(__name__)
# What a failed compile raises (a backend or C++ compiler error arrives as BackendCompilerFailed).
COMPILE_FAILURES = (torch._dynamo.exc.TorchDynamoException, torch._dynamo.exc.FailOnRecompileLimitHit)
# Graphs one step function may build before compiling counts as failed (dynamo's default, 8, is
# also counted over every model of the process; the MTP pass has three: T = 1, 1 + k, reusing).
RECOMPILE_LIMIT = 16


@contextlib.contextmanager
def _tracing_settings():
    """capture_scalar_outputs: expert counts read by .tolist() become symbolic sizes.
    specialize_int: T (a Python int) is a constant of its graph; B and W stay symbolic.
    No duck sizing: B and W are not taken as one size because they happened to be equal.
    specialize_float: the step's floats are model constants (else dynamo restarts its trace)."""
    with torch._dynamo.config.patch(capture_scalar_outputs=True, fail_on_recompile_limit_hit=True,
                                    specialize_float=True, specialize_int=True, recompile_limit=RECOMPILE_LIMIT), \
            fx_config.patch(use_duck_shape=False):  # fmt: skip
        yield


class StepCompiler:
    """A step function and its compiled form.

    NOTE: a step whose compile fails (no C++ compiler, an unsupported op, dynamo's per-function
    graph limit reached, which would otherwise run the code eagerly without saying so) runs
    eagerly instead and compiling stops for good, with one warning: a missing toolchain costs
    speed, never a request. Rerunning the step eagerly is safe even if the compiled graph had
    started: a step's cache writes are plain overwrites of its own slots. Any other error is the
    step's own and propagates as in eager mode."""

    def __init__(self, fn: Callable[..., Any], backend: str | Callable = "inductor"):
        self._eager = fn
        self._compiled: Callable[..., Any] | None = torch.compile(fn, dynamic=True, backend=backend)
        self.calls = 0  # compiled steps run (tests and benchmarks read it)
        self.failure: str | None = None  # why compiling stopped, if it did

    @property
    def active(self) -> bool:
        return self._compiled is not None

    def __call__(self, *args: Any) -> Any:
        if self._compiled is None:
            return self._eager(*args)
        try:
            with _tracing_settings():
                out = self._compiled(*args)
        except COMPILE_FAILURES as exc:
            self._compiled = None
            root = exc
            while root.__cause__ is not None:  # torch wraps the backend's own error
                root = root.__cause__
            self.failure = " ".join(f"{type(root).__name__}: {root}".split())[:500]
            log.warning("decode graphs: compiling the step failed, running it eagerly from now on (%s)", self.failure)
            return self._eager(*args)
        self.calls += 1
        return out
