"""Launching a step (forward + sampling) without waiting for it, so the host can work meanwhile.

Two forms, one interface (`launch` -> `Launched.wait`), chosen by the device:

- CUDA ("inline"): the step's kernels are queued on the current stream by the calling thread and
  the sampled tokens are copied to pinned host memory (non_blocking) behind them; `wait` blocks on
  an event recorded after that copy. Everything else the engine queues (page copies, host-tier
  copies, the next step) lands on the same stream, after it, so nothing else needs a barrier.
- CPU ("threaded"): a CPU has no queue to hand kernels to: the forward runs on one worker thread
  (torch ops release the GIL), and `wait` joins it. Steps run on the worker in launch order.

NOTE: on the threaded form every other runner command (page copies, host-tier copies, prompt
scoring) must first wait for the worker: `barrier`, which ModelRunner.execute calls. It returns
at once on the worker itself and in the inline form (stream order does the same job there).
"""

from __future__ import annotations

import threading
from concurrent.futures import Future, ThreadPoolExecutor, wait
from typing import Callable, Optional

import torch

from inference.engine.sampler import SampledRows


class Launched:
    """One launched step: `wait()` -> its SampledRows on the host (readable without a sync)."""

    def __init__(self, future: Optional[Future] = None, rows: Optional[SampledRows] = None, event=None):
        self._future, self._rows, self._event = future, rows, event

    def wait(self) -> SampledRows:
        if self._future is not None:
            return self._future.result()
        if self._event is not None:
            self._event.synchronize()
        return self._rows


class ForwardLauncher:
    def __init__(self, device: torch.device, threaded: Optional[bool] = None):
        self.device = torch.device(device)
        self.threaded = self.device.type != "cuda" if threaded is None else threaded
        self._pool: Optional[ThreadPoolExecutor] = None
        self._worker: Optional[int] = None  # the worker thread's ident
        self._last: Optional[Future] = None

    @property
    def form(self) -> str:
        return "threaded" if self.threaded else "inline"

    def launch(self, fn: Callable[[], SampledRows]) -> Launched:
        """Run `fn` (a forward and `sample_tensors`, no host sync) without waiting for its results."""
        if not self.threaded:
            rows = fn().to_host()
            event = None
            if self.device.type == "cuda":
                event = torch.cuda.Event()
                event.record()
            return Launched(rows=rows, event=event)
        if self._pool is None:
            self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="horizon-forward")
        self._last = self._pool.submit(self._on_worker, fn)
        return Launched(future=self._last)

    def _on_worker(self, fn: Callable[[], SampledRows]) -> SampledRows:
        self._worker = threading.get_ident()
        with torch.inference_mode():  # (thread-local: the engine thread's mode does not carry over)
            return fn()

    def barrier(self) -> None:
        """Wait until every launched step has run (threaded form, called from another thread)."""
        last = self._last
        if last is not None and threading.get_ident() != self._worker:
            wait([last])

    def close(self) -> None:
        self.barrier()
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            self._pool = None
