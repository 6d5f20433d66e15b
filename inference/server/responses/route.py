"""`POST /v1/responses`, `POST /v1/responses/input_tokens`, `GET`/`DELETE /v1/responses/{id}`: the
Responses API.

Errors keep OpenAI's shape. Continuation, in order of preference:
`previous_response_id` forks the stored conversation (the prompt extends the stored prompt + reply
token for token); `prompt_cache_key` (what Codex sends with `store: false` and the full history)
acts as chat completions' session id; otherwise the prompt is rendered from the input items.
"""

from __future__ import annotations

import uuid
from typing import AsyncIterator, Optional

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse

from inference.chat.messages import Message
from inference.server.errors import APIError
from inference.server.images import decode_images, image_inputs
from inference.server.prompting import prepare_chat
from inference.server.responses.convert import input_messages, to_chat
from inference.server.responses.protocol import InputTokensRequest, ResponsesRequest
from inference.server.responses.reply import ResponsesReply
from inference.server.responses.store import ForkView, ResponseRecord, ResponseStore
from inference.server.streaming import sse_response, until_disconnected
from inference.server.turn import Turn, TurnEnd, start_turn, turn_events
from inference.server.validation import shaped_route

# An SSE comment: parsers skip it, proxies and read timeouts see traffic during a long prefill.
KEEPALIVE = ": keepalive\n\n"


def responses_router(state, store: Optional[ResponseStore] = None) -> APIRouter:
    # OpenAI's error shape, with messages that name the deepest problem inside items and parts.
    router = APIRouter(route_class=shaped_route(lambda exc: exc.response()))
    store = store if store is not None else ResponseStore()

    @router.post("/v1/responses")
    async def create_response(body: ResponsesRequest, request: Request):
        previous, history, chat = _conversation(state, store, body)
        chain = previous.chain if previous else f"resp-chain-{uuid.uuid4().hex[:16]}"
        session_id = body.prompt_cache_key or (chain if body.store or previous else None)
        with state.admit():
            await decode_images(state, chat.messages)
            turn = start_turn(state, chat, session_id, sessions=ForkView(previous) if previous else None,
                              one_tool_call=body.parallel_tool_calls is False)
            namespaces = {t.name: ns for ns, t in body.function_tools() if ns is not None}
            reply = ResponsesReply(_envelope(body, state.model_name), state.tokenizer.encode, namespaces)
            stream = _response_events(state, store, body, turn, reply, history, chain)
            if body.stream:
                return sse_response(state, stream, lambda exc: reply.error_event(exc.message, exc.code, exc.param),
                                    keepalive=KEEPALIVE)
            return JSONResponse(await until_disconnected(request, stream))

    @router.post("/v1/responses/input_tokens")
    async def count_input_tokens(body: InputTokensRequest):
        """The prompt a create with this body would run, counted (a continuation: the forked ids)."""
        previous, _, chat = _conversation(state, store, body)
        sessions = ForkView(previous) if previous else state.sessions
        prepared = prepare_chat(chat, state.tokenizer, state.defaults, sessions, "count" if previous else None,
                                image_inputs(state))
        return {"object": "response.input_tokens", "input_tokens": len(prepared.prompt_ids)}

    @router.get("/v1/responses/{response_id}")
    async def get_response(response_id: str):
        return _stored(store, response_id).body

    @router.delete("/v1/responses/{response_id}")
    async def delete_response(response_id: str):
        _stored(store, response_id)
        store.delete(response_id)
        return {"id": response_id, "object": "response.deleted", "deleted": True}

    return router


def _conversation(state, store: ResponseStore, body: ResponsesRequest):
    """(the continued record or None, the history without instructions, the internal chat request)."""
    if body.model is not None and body.model != state.model_name:
        raise APIError(404, f"model: {body.model!r} does not exist; this server serves {state.model_name!r}",
                       param="model", code="model_not_found")
    previous = None
    if body.previous_response_id is not None:
        previous = store.get(body.previous_response_id)
        if previous is None:
            raise APIError(404, f"previous_response_id: response {body.previous_response_id!r} not found (not "
                           "stored, evicted, or from before a restart)", param="previous_response_id",
                           code="previous_response_not_found")
    history = (previous.history if previous else []) + input_messages(body)
    if not history:
        raise APIError(400, "input: empty, and no previous_response_id to continue", param="input")
    messages = ([Message.system(body.instructions)] if body.instructions else []) + history
    return previous, history, to_chat(body, messages, state.model_name)


def _stored(store: ResponseStore, response_id: str) -> ResponseRecord:
    record = store.get(response_id)
    if record is None:
        raise APIError(404, f"response {response_id!r} not found", param="response_id", code="not_found")
    return record


def _envelope(body: ResponsesRequest, model: str) -> dict:
    """The request fields a response echoes."""
    fmt = body.text.format.model_dump() if body.text and body.text.format else {"type": "text"}
    choice = body.tool_choice.model_dump() if hasattr(body.tool_choice, "model_dump") else (body.tool_choice or "auto")
    return {
        "model": model, "instructions": body.instructions, "max_output_tokens": body.max_output_tokens,
        "previous_response_id": body.previous_response_id, "metadata": body.metadata or {},
        "parallel_tool_calls": body.parallel_tool_calls if body.parallel_tool_calls is not None else True,
        "reasoning": {"effort": body.reasoning.effort if body.reasoning else None,
                      "summary": body.reasoning.summary if body.reasoning else None},
        "store": bool(body.store), "temperature": body.temperature, "top_p": body.top_p,
        "text": {"format": fmt}, "tool_choice": choice, "tools": [t.model_dump(exclude_none=True) for t in body.tools or []],
        "truncation": body.truncation or "disabled", "prompt_cache_key": body.prompt_cache_key, "user": None,
    }


async def _response_events(state, store: ResponseStore, body: ResponsesRequest, turn: Turn, reply: ResponsesReply,
                           history: list[Message], chain: str) -> AsyncIterator:
    """SSE strings when streaming, else one response body."""
    streaming = bool(body.stream)
    if streaming:
        for line in reply.start_events():
            yield line
    async for event in turn_events(state, turn):
        if not isinstance(event, TurnEnd):
            lines = reply.feed(event)
            if streaming:
                for line in lines:
                    yield line
            continue
        lines = reply.end_events(event) if streaming else []
        final = reply.response(reply.status(event), event) if streaming else reply.finish(event)
        _remember(state, store, body, turn, event, final, history, chain)
        if streaming:
            for line in lines:
                yield line
        else:
            yield final
        return


def _remember(state, store: ResponseStore, body: ResponsesRequest, turn: Turn, end: TurnEnd, final: dict,
              history: list[Message], chain: str) -> None:
    if end.finish_reason is None or end.finish_reason == "abort":
        return
    conversation = turn.prepared.conversation
    if body.prompt_cache_key and conversation is not None:
        # The session store extends what it holds in place; the record keeps its own copy.
        state.sessions.put(body.prompt_cache_key, turn.prepared.fingerprint, conversation.fork())
    if body.store:
        store.put(ResponseRecord(id=final["id"], body=final, history=history + [end.reply.message()], chain=chain,
                                 fingerprint=turn.prepared.fingerprint, conversation=conversation))

