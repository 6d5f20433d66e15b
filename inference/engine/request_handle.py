"""What `Engine.submit` returns: a stream of deltas and, at the end, the result."""

from __future__ import annotations

import queue
from typing import Callable, Iterator, Optional

from inference.engine.request import GenerateResult, StreamDelta, TokenLogprob, Usage


class RequestHandle:
    def __init__(self, request_id: str, drive: Callable[["RequestHandle"], bool]):
        self.request_id = request_id
        self._deltas: "queue.Queue[Optional[StreamDelta]]" = queue.Queue()
        self._drive = drive  # runs engine steps inline when no background loop is running
        self._tokens: list[int] = []
        self._logprobs: Optional[list[TokenLogprob]] = None
        self._result: Optional[GenerateResult] = None
        self._done = False
        self._error: Optional[BaseException] = None

    # engine side
    def push(self, delta: StreamDelta) -> None:
        self._deltas.put(delta)

    def fail(self, error: BaseException) -> None:
        """The background step loop crashed: wake the client with the error instead of hanging."""
        self._error = error
        self._deltas.put(None)

    # client side
    def __iter__(self) -> Iterator[StreamDelta]:
        while not self._done:
            delta = self._next()
            if delta is None:
                self._done = True
                raise RuntimeError(f"engine step failed while serving {self.request_id}: {self._error}") from self._error
            self._tokens.extend(delta.token_ids)
            if delta.logprobs:
                self._logprobs = (self._logprobs or []) + delta.logprobs
            if delta.finish_reason is not None:
                self._done = True
                self._result = GenerateResult(
                    request_id=self.request_id, token_ids=list(self._tokens), finish_reason=delta.finish_reason,
                    usage=delta.usage or Usage(), logprobs=self._logprobs, stop_reason=delta.stop_reason,
                )
            yield delta

    def _next(self) -> Optional[StreamDelta]:
        while True:
            try:
                return self._deltas.get_nowait()
            except queue.Empty:
                pass
            if not self._drive(self):  # a background loop serves us: wait for it
                try:
                    return self._deltas.get(timeout=0.1)
                except queue.Empty:
                    pass

    @property
    def done(self) -> bool:
        return self._done

    def result(self) -> GenerateResult:
        for _ in self:
            pass
        if self._result is None:
            raise RuntimeError(f"engine step failed while serving {self.request_id}: {self._error}") from self._error
        return self._result
