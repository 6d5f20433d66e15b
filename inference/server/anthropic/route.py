"""`POST /v1/messages` and `POST /v1/messages/count_tokens`: the Anthropic Messages API.

`x-api-key` and `anthropic-version` are accepted (the server has no keys and one API version);
`X-Session-Id` keeps the conversation's exact token history and KV cache, as in chat completions;
Claude Code's own `X-Claude-Code-Session-Id` does the same when no X-Session-Id is given, one
session per conversation it runs.
"""

from __future__ import annotations

import hashlib
from typing import AsyncIterator, Optional

from fastapi import APIRouter, Header, Request
from fastapi.responses import JSONResponse

from inference.server.anthropic.convert import system_text, to_chat
from inference.server.anthropic.errors import AnthropicRoute, error_event
from inference.server.anthropic.protocol import CountTokensRequest, MessagesRequest
from inference.server.anthropic.reply import AnthropicReply, sse_event
from inference.server.errors import APIError
from inference.server.images import decode_images, image_inputs
from inference.server.prompting import prepare_chat
from inference.server.streaming import sse_response, until_disconnected
from inference.server.turn import Turn, TurnEnd, prefilled_chat, start_turn, turn_events

PING = sse_event("ping", {"type": "ping"})


def anthropic_router(state) -> APIRouter:
    router = APIRouter(route_class=AnthropicRoute)

    @router.post("/v1/messages")
    async def create_message(body: MessagesRequest, request: Request,
                             x_session_id: Optional[str] = Header(default=None),
                             x_claude_code_session_id: Optional[str] = Header(default=None)):
        _check_model(state, body.model)
        x_session_id = x_session_id or _conversation_key(x_claude_code_session_id, body)
        chat, plan = to_chat(body, state.engine, state.model_name)
        with state.admit():
            await decode_images(state, chat.messages)
            turn = start_turn(state, chat, x_session_id, reasoning_budget=plan.budget, thinking=plan.enabled,
                              prefill=plan.prefill,
                              one_tool_call=getattr(body.tool_choice, "disable_parallel_tool_use", False))
            stream = _message_events(state, turn, AnthropicReply(state.model_name), x_session_id, body.stream)
            if body.stream:
                return sse_response(state, stream, error_event, keepalive=PING)
            return JSONResponse(await until_disconnected(request, stream))

    @router.post("/v1/messages/count_tokens")
    async def count_tokens(body: CountTokensRequest):
        _check_model(state, body.model)
        chat, plan = to_chat(body, state.engine, state.model_name)
        if plan.prefill:
            return {"input_tokens": len(prefilled_chat(state, chat, plan.prefill).prompt_ids)}
        prepared = prepare_chat(chat, state.tokenizer, state.defaults, state.sessions, None, image_inputs(state))
        return {"input_tokens": len(prepared.prompt_ids)}

    return router


def _conversation_key(claude_session: Optional[str], body: MessagesRequest) -> Optional[str]:
    """One Claude Code session runs several conversations (the agent, sub-agents, title and summary
    requests) under one id; keyed by id + system prompt + first message, each keeps its own history
    instead of evicting the others'."""
    if not claude_session:
        return None
    first = body.messages[0].model_dump_json()
    digest = hashlib.sha256((system_text(body.system) or "").encode() + b"\0" + first.encode()).hexdigest()[:16]
    return f"claude-code:{claude_session}:{digest}"


def _check_model(state, model: str) -> None:
    if model != state.model_name:
        raise APIError(404, f"model: {model!r} does not exist; this server serves {state.model_name!r}",
                       param="model")


async def _message_events(state, turn: Turn, reply: AnthropicReply, session_id: Optional[str],
                          streaming: bool) -> AsyncIterator:
    """SSE strings when streaming, else one message body."""
    if streaming:
        yield reply.start_event(len(turn.prepared.prompt_ids))
    async for event in turn_events(state, turn):
        if isinstance(event, TurnEnd):
            conversation = turn.prepared.conversation
            if conversation is not None and event.finish_reason is not None:
                state.sessions.put(session_id, turn.prepared.fingerprint, conversation)
            if not streaming:
                yield reply.message(event)
                return
            for line in reply.end_events(event):
                yield line
            return
        lines = reply.feed(event)
        if streaming:
            for line in lines:
                yield line
