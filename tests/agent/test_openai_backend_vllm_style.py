"""The agent's OpenAI backend against a vLLM/SGLang-style server: reasoning streamed as
`reasoning` (no `reasoning_content`), and past reasoning read back from `reasoning` on input."""

from __future__ import annotations

import json
import threading
import time

import uvicorn
from fastapi import FastAPI, Request
from fastapi.responses import StreamingResponse

from agent.backends.openai_compat import OpenAIBackend
from agent.config import OpenAIConfig
from inference.chat.messages import Message, ToolSpec
from inference.server.runner import listen_socket

BASH = ToolSpec(name="bash", parameters={"type": "object", "properties": {"command": {"type": "string"}}})


def _vllm_style_app(bodies: list[dict]) -> FastAPI:
    app = FastAPI()

    @app.post("/v1/chat/completions")
    async def chat(request: Request):
        bodies.append(await request.json())
        chunks = [{"choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}]},
                  {"choices": [{"index": 0, "delta": {"reasoning": "Need "}}]},
                  {"choices": [{"index": 0, "delta": {"reasoning": "files"}}]},
                  {"choices": [{"index": 0, "delta": {"content": "Listing:", "tool_calls": [
                      {"index": 0, "id": "c1", "type": "function",
                       "function": {"name": "bash", "arguments": '{"command": "ls"}'}}]}}]},
                  {"choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]},
                  {"choices": [], "usage": {"prompt_tokens": 12, "completion_tokens": 7}}]

        async def stream():
            for c in chunks:
                yield f"data: {json.dumps(c)}\n\n"
            yield "data: [DONE]\n\n"

        return StreamingResponse(stream(), media_type="text/event-stream")

    return app


def test_reasoning_from_a_vllm_style_server_is_kept_and_sent_back():
    bodies: list[dict] = []
    sock = listen_socket("127.0.0.1", 0)
    server = uvicorn.Server(uvicorn.Config(_vllm_style_app(bodies), log_level="warning"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    try:
        while not server.started:
            time.sleep(0.02)
        backend = OpenAIBackend(f"http://127.0.0.1:{sock.getsockname()[1]}", OpenAIConfig(model_name="m", max_retries=0))
        seen = []
        first = backend.complete([Message.user("list")], [BASH], on_delta=lambda kind, text: seen.append((kind, text)))
        assert first.message.reasoning_content == "Need files" and first.message.content == "Listing:"
        assert [(c.name, c.arguments) for c in first.message.tool_calls] == [("bash", {"command": "ls"})]
        assert ("reasoning", "Need ") in seen and first.usage.prompt_tokens == 12
        backend.complete([Message.user("list"), first.message, Message.tool("a.txt", "c1")], [BASH])
        sent = bodies[-1]["messages"][1]
        assert sent["reasoning"] == sent["reasoning_content"] == "Need files"
        backend.close()
    finally:
        server.should_exit = True
        thread.join(timeout=10)
        sock.close()
