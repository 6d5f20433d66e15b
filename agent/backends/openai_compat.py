"""`openai:URL` — any OpenAI-compatible chat completions endpoint, streamed over SSE.

Works with `horizon serve`, vLLM, SGLang and hosted GLM APIs. The API key is read from the
environment variable named by `openai.api_key_env` (no key: no Authorization header, which is
what local servers expect). Connection failures, 429 and 5xx are retried with exponential backoff
as long as nothing has been streamed yet. Reasoning arrives as `reasoning_content` or as
`reasoning` (current vLLM and SGLang), and past reasoning goes back under both names, so servers
that read either one keep the history the model wrote.
"""

from __future__ import annotations

import json
import os
import threading
import time
import uuid
from typing import Any
from urllib.parse import urlparse

import httpx

from agent.backends.base import BackendError, BackendInterrupted, BackendResponse, ContextOverflow, OnDelta, Usage
from agent.config import OpenAIConfig
from inference.chat.messages import Message, ToolCall, ToolSpec
from inference.chat.parser import parse_completion

RETRY_STATUS = {408, 409, 429, 500, 502, 503, 504}
TOOL_CALL_TAG = "<tool_call>"


def normalize_base_url(url: str) -> str:
    url = url.rstrip("/")
    for suffix in ("/chat/completions", "/completions"):
        url = url.removesuffix(suffix)
    if not urlparse(url).path:
        url += "/v1"
    return url


class _Stream:
    """Accumulates streamed chunks into one assistant message."""

    def __init__(self, on_delta: OnDelta | None):
        self.on_delta = on_delta
        self.content: list[str] = []
        self.reasoning: list[str] = []
        self.calls: dict[int, dict[str, Any]] = {}
        self.usage: dict[str, Any] = {}
        self.finish_reason: str | None = None
        self.started = False

    def feed(self, chunk: dict[str, Any]) -> None:
        if chunk.get("usage"):
            self.usage = chunk["usage"]
        for choice in chunk.get("choices") or []:
            delta = choice.get("delta") or choice.get("message") or {}
            if choice.get("finish_reason"):
                self.finish_reason = choice["finish_reason"]
            reasoning = delta.get("reasoning_content") or delta.get("reasoning")
            if reasoning:
                self._text("reasoning", reasoning, self.reasoning)
            if delta.get("content"):
                self._text("content", delta["content"], self.content)
            for i, part in enumerate(delta.get("tool_calls") or []):
                self.started = True
                slot = self.calls.setdefault(part.get("index", i), {"id": "", "name": "", "arguments": ""})
                fn = part.get("function") or {}
                slot["id"] = part.get("id") or slot["id"]
                slot["name"] += fn.get("name") or ""
                args = fn.get("arguments")
                slot["arguments"] += args if isinstance(args, str) else json.dumps(args) if args else ""

    def _text(self, kind: str, text: str, into: list[str]) -> None:
        self.started = True
        into.append(text)
        if self.on_delta is not None:
            self.on_delta(kind, text)

    def result(self, tools: list[ToolSpec]) -> BackendResponse:
        calls, errors = [], []
        for index in sorted(self.calls):
            slot = self.calls[index]
            try:
                arguments = json.loads(slot["arguments"]) if slot["arguments"].strip() else {}
                if not isinstance(arguments, dict):
                    raise ValueError("not a JSON object")
            except ValueError as exc:
                errors.append(f"the arguments of your call to {slot['name']!r} are not a valid JSON object ({exc}).")
                continue
            calls.append(ToolCall(id=slot["id"] or f"call_{uuid.uuid4().hex[:12]}", name=slot["name"], arguments=arguments))
        content = "".join(self.content)
        if not calls and TOOL_CALL_TAG in content:
            # Text-format fallback: a server without a GLM tool parser passes the markup through.
            parsed = parse_completion(content, tools, start_in_reasoning=False)
            content, calls = parsed.content, parsed.tool_calls
            errors += [e.message for e in parsed.errors]
        message = Message.assistant(
            content=content or None, reasoning="".join(self.reasoning) or None, tool_calls=calls
        )
        details = self.usage.get("prompt_tokens_details") or {}
        usage = Usage(
            prompt_tokens=int(self.usage.get("prompt_tokens") or 0),
            cached_tokens=int(details.get("cached_tokens") or 0),
            completion_tokens=int(self.usage.get("completion_tokens") or 0),
        )
        return BackendResponse(message=message, usage=usage, format_errors=errors, finish_reason=self.finish_reason)


class OpenAIBackend:
    def __init__(self, url: str, config: OpenAIConfig | None = None, *, session_id: str | None = None):
        self.config = config or OpenAIConfig()
        self.base_url = normalize_base_url(url)
        self.session_id = session_id or uuid.uuid4().hex
        headers = {"Content-Type": "application/json"}
        key = os.environ.get(self.config.api_key_env)
        if key:
            headers["Authorization"] = f"Bearer {key}"
        self._client = httpx.Client(headers=headers, timeout=httpx.Timeout(self.config.request_timeout_s, connect=10))
        self._model_name = self.config.model_name
        self._model_list: list[dict[str, Any]] | None = None
        self._vision: bool | None = None

    def model_name(self) -> str:
        if self._model_name is None:
            models = self._models()
            if not models:
                raise BackendError(f"{self.base_url}/models lists no models; set openai.model_name")
            self._model_name = models[0]["id"]
        return self._model_name

    @property
    def supports_images(self) -> bool:
        """openai.vision when set, else whether the server lists "image" in the model's
        input_modalities (`horizon serve` does for vision checkpoints; others: set openai.vision)."""
        if self._vision is None:
            if self.config.vision is not None:
                self._vision = self.config.vision
            else:
                name = self.model_name()
                entry = next((m for m in self._models() if m.get("id") == name), {})
                self._vision = "image" in (entry.get("input_modalities") or [])
        return self._vision

    def _models(self) -> list[dict[str, Any]]:
        if self._model_list is None:
            response = self._request_with_retries(lambda: self._client.get(f"{self.base_url}/models"))
            try:
                self._model_list = [m for m in response.json().get("data") or [] if isinstance(m, dict)]
            except (ValueError, AttributeError):
                raise BackendError(f"{self.base_url}/models did not answer with a model list") from None
        return self._model_list

    def complete(
        self,
        messages: list[Message],
        tools: list[ToolSpec],
        *,
        reasoning_effort: str | None = None,
        on_delta: OnDelta | None = None,
        cancel: threading.Event | None = None,
        max_tokens: int | None = None,
    ) -> BackendResponse:
        cfg = self.config
        body: dict[str, Any] = {
            "model": self.model_name(),
            "messages": [_wire_message(m) for m in messages],
            "stream": True,
            "stream_options": {"include_usage": True},
        }
        if tools:
            body["tools"] = [t.to_openai() for t in tools]
        if reasoning_effort:
            body["reasoning_effort"] = reasoning_effort
        for key, value in (("temperature", cfg.temperature), ("top_p", cfg.top_p), ("max_tokens", max_tokens or cfg.max_tokens)):
            if value is not None:
                body[key] = value
        if cfg.send_session_id:
            body["session_id"] = self.session_id
        # The header routes the turns of one run to one session (horizon serve); others ignore it.
        headers = {"X-Session-Id": self.session_id}
        body.update(cfg.extra_body)
        for attempt in range(cfg.max_retries + 1):
            stream = _Stream(on_delta)
            try:
                self._stream(body, headers, stream, cancel)
                return stream.result(tools)
            except BackendInterrupted:
                raise
            except (httpx.TransportError, _Retryable) as exc:
                if stream.started or attempt == cfg.max_retries:
                    raise BackendError(f"{self.base_url}: {exc}") from None
                time.sleep(min(2**attempt, 30))
        raise AssertionError("unreachable")

    def _stream(self, body: dict[str, Any], headers: dict[str, str], stream: _Stream,
                cancel: threading.Event | None) -> None:
        with self._client.stream("POST", f"{self.base_url}/chat/completions", json=body, headers=headers) as response:
            if response.status_code != 200:
                text = response.read().decode("utf-8", "replace")[:1000]
                if response.status_code in RETRY_STATUS:
                    raise _Retryable(f"HTTP {response.status_code}: {text}")
                if response.status_code == 400 and ("context_length" in text or "maximum context" in text):
                    raise ContextOverflow(f"{self.base_url}: HTTP 400: {text}")
                raise BackendError(f"{self.base_url}: HTTP {response.status_code}: {text}")
            for line in response.iter_lines():
                if cancel is not None and cancel.is_set():
                    raise BackendInterrupted("interrupted while the model was generating")
                if not line.startswith("data:"):
                    continue
                data = line[5:].strip()
                if data == "[DONE]":
                    break
                try:
                    chunk = json.loads(data)
                except json.JSONDecodeError:
                    raise BackendError(f"{self.base_url}: malformed stream chunk {data[:200]!r}") from None
                if "error" in chunk:
                    raise BackendError(f"{self.base_url}: {chunk['error']}")
                stream.feed(chunk)

    def _request_with_retries(self, send) -> httpx.Response:
        for attempt in range(self.config.max_retries + 1):
            try:
                response = send()
                if response.status_code not in RETRY_STATUS:
                    if response.status_code != 200:
                        raise BackendError(f"{self.base_url}: HTTP {response.status_code}: {response.text[:500]}")
                    return response
            except httpx.TransportError as exc:
                if attempt == self.config.max_retries:
                    raise BackendError(f"{self.base_url}: {exc}") from None
            time.sleep(min(2**attempt, 30))
        raise BackendError(f"{self.base_url}: still failing after {self.config.max_retries} retries")

    def close(self) -> None:
        self._client.close()


class _Retryable(Exception):
    pass


def _wire_message(message: Message) -> dict[str, Any]:
    out = message.to_openai()
    if "reasoning_content" in out:
        out["reasoning"] = out["reasoning_content"]
    return out
