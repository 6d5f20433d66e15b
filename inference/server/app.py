"""The OpenAI-compatible HTTP API over the embedded engine (FastAPI).

Routes: POST /v1/chat/completions, POST /v1/completions, GET /v1/models, GET /health.
Every error is an OpenAI-shaped JSON body with a real status; nothing a client sends can stop the
server. A client that disconnects mid-request aborts it, which frees its pages in the engine.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from dataclasses import dataclass, field
from typing import Any, AsyncIterator, Callable, Optional

from fastapi import FastAPI, Header, Request

from inference.server.anthropic.route import anthropic_router
from inference.server.responses.route import responses_router
from inference.server.choices import ChoiceEnd, merge_responses, merge_streams, seeded_for_choice
from inference.server.constraints import compile_spec, response_format_spec
from inference.server.engine_bridge import submit_or_400
from inference.server.errors import APIError, install_error_handlers
from inference.server.images import decode_images, image_inputs
from inference.server.legacy_logprobs import LegacyLogprobs, merge_blocks
from inference.server.output_text import OutputText
from inference.server.prompting import ServerDefaults, prepare_chat, sampling_params
from inference.server.protocol import ChatCompletionRequest, CompletionRequest, SamplingFields
from inference.server.replies import SSE_DONE, ChatReply, new_id, sse, usage_body
from inference.server.sessions import SessionStore
from inference.server.streaming import sse_response, until_disconnected
from inference.server.turn import TokenLogprobs, Turn, TurnEnd, submit_turn, turn_events


@dataclass
class ServerState:
    engine: Any
    tokenizer: Any
    model_name: str
    max_context: int
    defaults: ServerDefaults = field(default_factory=ServerDefaults)
    max_inflight: int = 256
    inflight: int = 0
    sessions: SessionStore = field(default_factory=SessionStore)

    @contextlib.contextmanager
    def admit(self):
        if self.inflight >= self.max_inflight:
            raise APIError(503, f"server overloaded: {self.inflight} requests in flight (limit "
                           f"{self.max_inflight}); retry later", code="overloaded")
        self.inflight += 1
        try:
            yield
        finally:
            self.inflight -= 1


def create_app(state: ServerState) -> FastAPI:
    app = FastAPI(title="Horizon GLM-5.x server")
    app.state.horizon = state
    install_error_handlers(app)
    app.include_router(anthropic_router(state))
    app.include_router(responses_router(state))

    @app.get("/health")
    async def health() -> dict:
        return {"status": "ok", "model": state.model_name, "inflight": state.inflight,
                "sessions": len(state.sessions), "engine": state.engine.stats()}

    @app.get("/v1/models")
    async def models() -> dict:
        modalities = ["text", "image"] if image_inputs(state) is not None else ["text"]
        return {"object": "list", "data": [{"id": state.model_name, "object": "model", "created": 0,
                                            "owned_by": "horizon", "max_model_len": state.max_context,
                                            "input_modalities": modalities}]}

    @app.post("/v1/chat/completions")
    async def chat_completions(body: ChatCompletionRequest, request: Request,
                               x_session_id: Optional[str] = Header(default=None)):
        _check_request(state, body)
        session_id = body.session_id or x_session_id
        if body.n > 1 and session_id:
            raise APIError(400, f"n: {body.n} choices cannot extend one session's conversation; use n=1 with "
                           "session_id", param="n")
        with state.admit():
            await decode_images(state, body.messages)
            prepared = prepare_chat(body, state.tokenizer, state.defaults, state.sessions, session_id,
                                    image_inputs(state))
            await compile_spec(state.engine, prepared.grammar)
            logprobs = (body.top_logprobs or 0) if body.logprobs else None
            reply_id, created = new_id("chatcmpl"), int(time.time())
            streams = [_chat_events(state, body, submit_turn(state, body, prepared, session_id, logprobs=logprobs,
                                                             choice=i),
                                    session_id, ChatReply(state.model_name, i, reply_id, created),
                                    standalone=body.n == 1)
                       for i in range(body.n)]
            closing = ChatReply(state.model_name, 0, reply_id, created)
            return await _deliver(state, request, body, streams, closing.usage_chunk)

    @app.post("/v1/completions")
    async def completions(body: CompletionRequest, request: Request,
                          x_session_id: Optional[str] = Header(default=None)):
        _check_request(state, body)
        if isinstance(body.prompt, str) or isinstance(body.prompt[0], str):
            text = body.prompt if isinstance(body.prompt, str) else body.prompt[0]
            prompt_ids = state.tokenizer.encode(text)
        else:
            prompt_ids = list(body.prompt)
            text = None
        session_id = body.session_id or x_session_id
        if body.n > 1 and session_id:
            raise APIError(400, f"n: {body.n} choices cannot share one session; use n=1 with session_id", param="n")
        with state.admit():
            want_logprobs = isinstance(body.logprobs, int) and not isinstance(body.logprobs, bool)
            grammar = response_format_spec(body)
            await compile_spec(state.engine, grammar)
            gens = [_completion_request(state, body, prompt_ids, session_id,
                                        logprobs=body.logprobs if want_logprobs else None, choice=i, grammar=grammar)
                    for i in range(body.n)]
            echoed = "" if not body.echo else text if text is not None else state.tokenizer.decode(prompt_ids)
            # echo + logprobs: the prompt's own tokens are scored too (the first has no logprob).
            prompt_scores = (prompt_ids, await _prompt_logprobs(state, prompt_ids, body.logprobs)) \
                if body.echo and want_logprobs else None
            cid, created = new_id("cmpl"), int(time.time())
            streams = [_completion_events(state, body, gen, submit_or_400(state.engine, gen), body.stream, echoed,
                                          prompt_scores, index=i, cid=cid, created=created, standalone=body.n == 1)
                       for i, gen in enumerate(gens)]
            envelope = {"id": cid, "object": "text_completion", "created": created, "model": state.model_name}
            return await _deliver(state, request, body, streams,
                                  lambda usage: sse({**envelope, "choices": [], "usage": usage}))

    return app


def _check_request(state: ServerState, body: SamplingFields) -> None:
    """Fields set to what this server cannot honour, then the model name."""
    model = body.model
    for param, why in body.refusals():
        raise APIError(400, why, param=param, code="unsupported_value")
    if model != state.model_name:
        raise APIError(404, f"model: {model!r} does not exist; this server serves {state.model_name!r}",
                       param="model", code="model_not_found")


def _wants_usage(body: SamplingFields) -> bool:
    return bool(body.stream_options and body.stream_options.include_usage)


async def _prompt_logprobs(state: ServerState, prompt_ids: list[int], top_n: int) -> list:
    from inference.engine.request import EngineError

    try:
        return await asyncio.to_thread(state.engine.prompt_logprobs, prompt_ids, top_n)
    except EngineError as exc:
        raise APIError(400, str(exc), param="prompt", code="invalid_value") from None


def _completion_request(state: ServerState, body: CompletionRequest, prompt_ids: list[int], session_id, logprobs,
                        choice: int = 0, grammar=None):
    from inference.engine.request import GenerateRequest

    params = seeded_for_choice(sampling_params(body, len(prompt_ids), state.max_context,
                                               state.tokenizer.stop_token_ids, state.defaults, logprobs, grammar),
                               choice)
    return GenerateRequest(prompt_ids=prompt_ids, params=params, session_id=session_id,
                           request_id=f"http-{uuid.uuid4().hex[:16]}")


async def _chat_events(state: ServerState, body: ChatCompletionRequest, turn: Turn, session_id: Optional[str],
                       reply: ChatReply, standalone: bool = True) -> AsyncIterator:
    """Yields SSE strings when streaming, else one final response dict. A choice of an n > 1
    request (not standalone) ends its stream with a ChoiceEnd instead of the usage chunk and [DONE]."""
    streaming = body.stream
    pending_lps: list[dict] = []  # logprobs of tokens whose text no chunk has carried yet
    if streaming:
        yield reply.chunk({"role": "assistant", "content": ""})
    end = None
    async with contextlib.aclosing(turn_events(state, turn, reply)) as events:
        async for event in events:
            if isinstance(event, TurnEnd):
                end = event
            elif isinstance(event, TokenLogprobs):
                pending_lps += event.entries
            elif streaming and (out := reply.delta(event)) is not None:
                yield reply.chunk(out, logprobs=pending_lps)
                pending_lps = []
    reason, usage = end.finish_reason, end.usage
    if turn.prepared.conversation is not None and reason is not None:
        state.sessions.put(session_id, turn.prepared.fingerprint, turn.prepared.conversation)
    if not streaming:
        yield reply.response(reason, usage)
        return
    yield reply.chunk({}, reason=_chat_finish(reason, reply), final=True, logprobs=pending_lps)
    if not standalone:
        yield ChoiceEnd(usage)
        return
    if _wants_usage(body) and usage is not None:
        yield reply.chunk({}, usage=usage)
    yield SSE_DONE


def _chat_finish(reason: Optional[str], reply: ChatReply) -> str:
    from inference.server.replies import finish_reason

    return finish_reason(reason, bool(reply.tool_calls))


async def _completion_events(state: ServerState, body: CompletionRequest, gen, deltas: AsyncIterator,
                             streaming: bool, echoed: str = "", prompt_scores=None, *, index: int = 0, cid: str = "",
                             created: int = 0, standalone: bool = True) -> AsyncIterator:
    """`echoed` (the prompt, for echo=true) leads the text, in the first chunk when streaming, and
    `prompt_scores` (prompt ids, their logprobs) its logprobs. A choice of an n > 1 request (not
    standalone) ends with a ChoiceEnd instead of usage and [DONE]."""
    cid, created = cid or new_id("cmpl"), created or int(time.time())
    text = OutputText(state.tokenizer, gen.params.stop)
    pieces: list[str] = [echoed] if echoed else []
    legacy = LegacyLogprobs(state.tokenizer)
    blocks = [legacy.block(*prompt_scores)] if prompt_scores else []
    sent = 0  # blocks already streamed
    reason, usage = None, None

    def body_of(piece: str, finish: Optional[str], lps: Optional[dict] = None) -> dict:
        return {"id": cid, "object": "text_completion", "created": created, "model": state.model_name,
                "choices": [{"index": index, "text": piece, "finish_reason": finish, "logprobs": lps}]}

    async with contextlib.aclosing(deltas):
        async for delta in deltas:
            final = delta.finish_reason is not None
            piece = text.push(delta.token_ids, delta.stop_reason if final else None)
            if final:
                piece += text.finish()
                reason, usage = delta.finish_reason, delta.usage
            pieces.append(piece)
            if echoed and streaming:
                piece, echoed = echoed + piece, ""
            if delta.logprobs:
                blocks.append(legacy.block(delta.token_ids, delta.logprobs))
            if streaming and (piece or final):
                lps = merge_blocks(blocks[sent:])
                sent = len(blocks)
                yield sse(body_of(piece, "length" if reason == "length" else ("stop" if final else None), lps))
    if streaming:
        if not standalone:
            yield ChoiceEnd(usage)
            return
        if _wants_usage(body) and usage is not None:
            yield sse({**body_of("", None), "choices": [], "usage": usage_body(usage)})
        yield SSE_DONE
        return
    lps = merge_blocks(blocks)
    out = body_of("".join(pieces), "length" if reason == "length" else "stop", lps)
    out["usage"] = usage_body(usage) if usage is not None else None
    yield out


async def _deliver(state: ServerState, request: Request, body: SamplingFields, streams: list[AsyncIterator],
                   usage_chunk: Callable[[dict], str]):
    """The reply: one choice's stream as it is, or n > 1 merged (chunks interleaved, closed by
    `usage_chunk(merged usage)` when stream_options asks; or one body); as SSE or as one JSON body."""
    if len(streams) == 1:
        stream = streams[0]
    elif body.stream:
        stream = merge_streams(streams, lambda usage: usage_chunk(usage) if _wants_usage(body) else None)
    else:
        stream = merge_responses(streams)
    if body.stream:
        return sse_response(state, stream, _error_chunk)
    return await until_disconnected(request, stream)


def _error_chunk(exc: APIError) -> str:
    """An error after the status line is sent: one OpenAI-shaped error body as an SSE chunk."""
    return sse(exc.body())
