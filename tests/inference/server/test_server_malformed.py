"""100 malformed requests to each of /v1/messages and /v1/responses: every one gets a 4xx in its API's
own error shape, while valid requests sent at the same time complete normally."""

from __future__ import annotations

import copy
import json
from concurrent.futures import ThreadPoolExecutor

import httpx

MODEL = "glm-tiny"
USER = [{"role": "user", "content": "list the files"}]
CLAUDE_BASH = {"name": "bash", "input_schema": {"type": "object", "properties": {"command": {"type": "string"}}}}
OPENAI_BASH = {"type": "function", "name": "bash", "parameters": CLAUDE_BASH["input_schema"]}
RAW = [b"{", b'{"model": "glm-tiny",}', b"not json", b"", b"null", b"[]", b'"text"', b"[1, 2"]


def _anthropic_mutations() -> list:
    base = {"model": MODEL, "max_tokens": 16, "messages": USER}
    user = lambda content: [{"role": "user", "content": content}]  # noqa: E731
    changes = [
        {"model": None}, {"model": 123}, {"model": "claude-sonnet-4-5"}, {"max_tokens": None}, {"max_tokens": "ten"},
        {"max_tokens": 0}, {"max_tokens": -1}, {"max_tokens": 10_000}, {"messages": None}, {"messages": "hi"},
        {"messages": []}, {"messages": [{"role": "system", "content": "x"}]}, {"messages": [{"role": "user"}]},
        {"messages": user(123)}, {"messages": user([{"type": "bogus"}])}, {"messages": user([{"type": "text"}])},
        {"messages": user([{"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "AA"}}])},
        {"messages": user([{"type": "tool_result"}])},
        {"messages": USER + [{"role": "assistant", "content": [{"type": "tool_result", "tool_use_id": "t"}]}]},
        {"messages": USER + [{"role": "assistant", "content": [{"type": "tool_use", "name": "bash", "input": {}}]}]},
        {"messages": USER + [{"role": "assistant", "content": "prefill "}]},
        {"messages": user("word " * 5000)}, {"temperature": 5}, {"temperature": "hot"}, {"top_p": 0},
        {"top_k": -1}, {"stop_sequences": "Listing"}, {"stop_sequences": [1]}, {"stop_sequences": ["s"] * 17},
        {"tools": [{"name": "bad name!", "input_schema": {"type": "object"}}]}, {"tools": [{"name": "x"}]},
        {"tools": [{"name": "x", "input_schema": {"type": "string"}}]},
        {"tools": [{"type": "web_search_20250305", "name": "web_search"}]}, {"tools": [CLAUDE_BASH, CLAUDE_BASH]},
        {"tools": "bash"}, {"tool_choice": {"type": "tool"}}, {"tool_choice": "auto"},
        {"tools": [CLAUDE_BASH], "tool_choice": {"type": "tool", "name": "missing"}},
        {"tool_choice": {"type": "any"}}, {"thinking": {"type": "enabled"}},
        {"thinking": {"type": "enabled", "budget_tokens": 100}},
        {"thinking": {"type": "enabled", "budget_tokens": 2048}}, {"thinking": {"type": "sometimes"}},
        {"tools": [CLAUDE_BASH], "tool_choice": {"type": "any"}, "max_tokens": 2000,
         "thinking": {"type": "enabled", "budget_tokens": 1024}},
        {"system": 5}, {"system": [{"type": "image", "source": {}}]}, {"metadata": "x"}, {"stream": [1]},
        {"output_config": {"effort": "extreme"}},
    ]
    return [_apply(base, c) for c in changes]


def _responses_mutations() -> list:
    base = {"model": MODEL, "input": "hi", "max_output_tokens": 8}
    changes = [
        {"model": None}, {"model": 123}, {"model": "gpt-5"}, {"input": None}, {"input": 5}, {"input": []},
        {"input": [{"type": "bogus"}]}, {"input": [{"role": "wizard", "content": "x"}]},
        {"input": [{"type": "function_call", "name": "x"}]},
        {"input": [{"type": "function_call", "call_id": "c", "name": "x", "arguments": "not json"}]},
        {"input": [{"type": "function_call", "call_id": "c", "name": "x", "arguments": "[1]"}]},
        {"input": [{"type": "function_call_output", "output": "x"}]},
        {"input": [{"role": "user", "content": [{"type": "bogus", "text": "x"}]}]},
        {"input": [{"role": "user", "content": [{"type": "input_image", "image_url": "data:,"}]}]},
        {"input": [{"role": "user", "content": 5}]}, {"input": [{"type": "reasoning", "summary": "x"}]},
        {"input": "word " * 5000}, {"temperature": 3}, {"temperature": "hot"}, {"top_p": 0},
        {"max_output_tokens": 0}, {"max_output_tokens": "x"}, {"max_output_tokens": 10_000},
        {"tools": [{"type": "web_search"}]}, {"tools": [{"type": "function"}]}, {"tools": "bash"},
        {"tool_choice": "sometimes"}, {"tool_choice": {"type": "function"}}, {"tool_choice": "required"},
        {"tools": [OPENAI_BASH], "tool_choice": {"type": "function", "name": "missing"}},
        {"reasoning": {"effort": "extreme"}}, {"reasoning": "high"}, {"text": {"format": {"type": "yaml"}}},
        {"previous_response_id": "resp_missing"}, {"previous_response_id": ""}, {"background": True},
        {"conversation": "conv_1"}, {"stream": [1]}, {"metadata": {"k": 1}}, {"prompt_cache_key": ""},
        {"instructions": 5}, {"truncation": "sometimes"}, {"parallel_tool_calls": "maybe"}, {"store": [1]},
        {"input": [{"type": "message", "role": "assistant", "content": [{"type": "output_text"}]}]},
        {"tools": [{"type": "function", "name": "x", "parameters": "obj"}]},
        {"input": [{"type": "function_call_output", "call_id": "c", "output": 5}]},
    ]
    return [_apply(base, c) for c in changes]


def _apply(base: dict, change: dict) -> dict:
    body = copy.deepcopy(base)
    for key, value in change.items():
        if value is None:
            body.pop(key, None)
        else:
            body[key] = value
    return body


def _hundred(mutations: list) -> list:
    """The mutations as given, as streaming requests, and the raw malformed bodies: 100 in all."""
    bodies = [json.dumps(m).encode() for m in mutations]
    bodies += [json.dumps({**m, "stream": True} if "stream" not in m else m).encode() for m in mutations]
    bodies += RAW
    assert len(bodies) >= 100, len(bodies)
    return bodies[:100]


def _anthropic_shape(resp: httpx.Response) -> bool:
    body = resp.json()
    return (400 <= resp.status_code < 500 and body["type"] == "error" and isinstance(body["error"]["message"], str)
            and body["error"]["type"] in {"invalid_request_error", "not_found_error", "request_too_large"})


def _openai_shape(resp: httpx.Response) -> bool:
    err = resp.json()["error"]
    return 400 <= resp.status_code < 500 and set(err) == {"message", "type", "param", "code"} and err["message"]


def _run(live_server, path: str, bodies: list, good, check_shape) -> None:
    url = live_server.base_url + path

    def bad(body: bytes) -> tuple[bytes, int, str]:
        resp = httpx.post(url, content=body, headers={"content-type": "application/json", "x-api-key": "k",
                                                      "anthropic-version": "2023-06-01"}, timeout=120)
        return body, resp.status_code, resp.text if not check_shape(resp) else ""

    with ThreadPoolExecutor(max_workers=12) as pool:
        goods = [pool.submit(good, url, i) for i in range(6)]
        results = list(pool.map(bad, bodies))
        assert all(f.result() for f in goods)
    wrong = [(b[:100], status, text[:200]) for b, status, text in results if text]
    assert not wrong, wrong
    assert live_server.state.inflight == 0


def _good_message(url: str, i: int) -> bool:
    body = {"model": MODEL, "max_tokens": 64, "messages": USER, "tools": [CLAUDE_BASH], "temperature": 0,
            "stream": i % 2 == 0}
    resp = httpx.post(url, json=body, timeout=120)
    if body["stream"]:
        return resp.status_code == 200 and '"stop_reason": "tool_use"' in resp.text and "event: message_stop" in resp.text
    return resp.status_code == 200 and resp.json()["content"][-1]["input"] == {"command": "ls -la"}


def _good_response(url: str, i: int) -> bool:
    body = {"model": MODEL, "input": "list the files", "tools": [OPENAI_BASH], "temperature": 0, "stream": i % 2 == 0}
    resp = httpx.post(url, json=body, timeout=120)
    if body["stream"]:
        return resp.status_code == 200 and "event: response.completed" in resp.text
    return resp.status_code == 200 and json.loads(resp.json()["output"][-1]["arguments"]) == {"command": "ls -la"}


def test_hundred_malformed_anthropic_requests(live_server):
    _run(live_server, "/messages", _hundred(_anthropic_mutations()), _good_message, _anthropic_shape)


def test_hundred_malformed_responses_requests(live_server):
    _run(live_server, "/responses", _hundred(_responses_mutations()), _good_response, _openai_shape)


def test_malformed_count_tokens_and_unknown_response(live_server):
    resp = httpx.post(live_server.base_url + "/messages/count_tokens", json={"model": MODEL, "messages": "hi"})
    assert _anthropic_shape(resp) and "messages" in resp.json()["error"]["message"]
    resp = httpx.get(live_server.base_url + "/responses/resp_nope")
    assert resp.status_code == 404 and _openai_shape(resp)


def test_overload_in_each_shape(live_server):
    state = live_server.state
    limit, state.max_inflight = state.max_inflight, 0
    try:
        claude = httpx.post(live_server.base_url + "/messages", json={"model": MODEL, "max_tokens": 4, "messages": USER})
        openai_style = httpx.post(live_server.base_url + "/responses", json={"model": MODEL, "input": "hi"})
    finally:
        state.max_inflight = limit
    assert claude.status_code == 529 and claude.json()["error"]["type"] == "overloaded_error"
    assert openai_style.status_code == 503 and openai_style.json()["error"]["code"] == "overloaded"
