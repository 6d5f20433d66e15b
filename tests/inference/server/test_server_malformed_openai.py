"""100 malformed requests get 4xx answers in OpenAI's error shape while valid streams in flight
finish exactly as they would alone."""

from __future__ import annotations

import json
import threading

import httpx

from .conftest import BASH_TOOL

MODEL = "glm-tiny"
USER = [{"role": "user", "content": "hello"}]
CHAT = {"model": MODEL, "messages": USER}
COMPLETION = {"model": MODEL, "prompt": "hello"}


def _chat(**fields) -> dict:
    return {**CHAT, **fields}


def _completion(**fields) -> dict:
    return {**COMPLETION, **fields}


CHAT_BAD = [
    _chat(temperature="hot"), _chat(temperature=-1), _chat(temperature=3), _chat(top_p=0), _chat(top_p=1.5),
    _chat(top_k=-1), _chat(min_p=2), _chat(n=0), _chat(n=17), _chat(n="two"), _chat(max_tokens=0),
    _chat(max_tokens=-5), _chat(max_tokens="ten"), _chat(max_tokens=10_000), _chat(max_completion_tokens=0),
    _chat(stop=["s"] * 17), _chat(stop=5), _chat(seed="x"), _chat(logprobs="yes"), _chat(top_logprobs=21),
    _chat(top_logprobs=-1), _chat(top_logprobs=3), _chat(presence_penalty=3), _chat(frequency_penalty=-2.5),
    _chat(repetition_penalty=0), _chat(logit_bias={"abc": 1}), _chat(logit_bias={"5": 101}),
    _chat(logit_bias={"999999": 5}), _chat(logit_bias=[1, 2]), {"model": MODEL, "messages": "hi"},
    {"model": MODEL, "messages": []}, {"model": MODEL}, _chat(messages=[{"role": "wizard", "content": "x"}]),
    _chat(messages=[{"content": "x"}]), _chat(messages=[{"role": "user", "content": 5}]),
    _chat(messages=[{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}]),
    _chat(messages=[{"role": "user", "content": "x", "tool_calls": [{"id": "1", "function": {"name": "f"}}]}]),
    _chat(messages=[{"role": "assistant", "tool_calls": [{"id": "1", "function": {"name": "f", "arguments": "{"}}]}]),
    _chat(messages=["hello"]), _chat(messages=[None]), _chat(messages=[{"role": "user", "content": "word " * 5000}]),
    _chat(tools=[{"type": "code_interpreter"}]), _chat(tools=[{"type": "function", "function": {}}]),
    _chat(tools="bash"), _chat(tool_choice="sometimes"), _chat(tool_choice={"type": "function"}),
    _chat(tool_choice="required"), _chat(tools=[BASH_TOOL], tool_choice={"type": "function", "function": {"name": "x"}}),
    _chat(response_format={"type": "xml"}), _chat(response_format={"type": "json_schema"}),
    _chat(response_format={"type": "json_schema", "json_schema": {"name": "a", "schema": {"type": "objekt"}}}),
    _chat(response_format="json"), _chat(tools=[BASH_TOOL], tool_choice="required", response_format={"type": "json_object"}),
    _chat(stream="yes"), _chat(stream_options={"include_usage": "x"}), _chat(stream_options=3),
    _chat(temprature=0.5), _chat(foo=1, bar=2), _chat(model=5), _chat(model=None), {"messages": USER},
    _chat(model="gpt-4o"), _chat(reasoning_effort="extreme"), _chat(chat_template_kwargs=5),
    _chat(session_id=""), _chat(session_id="s" * 300), _chat(n=2, session_id="s1"), _chat(modalities=["audio"]),
    _chat(audio={"voice": "alloy", "format": "wav"}), _chat(web_search_options={}),
    _chat(functions=[{"name": "f", "parameters": {}}]), _chat(function_call="auto"), _chat(parallel_tool_calls="no"),
    _chat(ignore_eos="sometimes"), _chat(user=5), _chat(metadata="m"),
]
COMPLETION_BAD = [
    _completion(prompt=[]), _completion(prompt=["a", "b"]), _completion(prompt=[999999]), _completion(prompt=5),
    _completion(prompt=None), {"model": MODEL}, _completion(echo="x"), _completion(logprobs=21),
    _completion(logprobs="x"), _completion(best_of=3), _completion(suffix="y"), _completion(max_tokens=-1),
    _completion(prompt=list(range(5000))), _completion(n=0), _completion(stop=["s"] * 17), _completion(bogus=True),
    _completion(model="nope"), _completion(response_format={"type": "json_schema"}), _completion(top_logprobs=3),
]
RAW_BAD = [b'{"model": "glm-tiny", "messages": [', b"", b"null", b"[]", b'"text"', b"5", b"{,}", b"\xff\xfe",
           b'{"model": "glm-tiny", "messages": [{"role": "user", "content": "x"}]}}']


def _cases() -> list[tuple[str, object]]:
    return ([("/chat/completions", b) for b in CHAT_BAD] + [("/completions", b) for b in COMPLETION_BAD]
            + [("/chat/completions", b) for b in RAW_BAD])


def _check_error(resp: httpx.Response, what) -> None:
    assert 400 <= resp.status_code < 500, (what, resp.status_code, resp.text)
    err = resp.json()["error"]
    assert set(err) == {"message", "type", "param", "code"} and err["message"], (what, err)


def _stream_text(base_url: str, seed: int) -> tuple[str, int]:
    body = {"model": MODEL, "prompt": "[gMASK]<sop><|user|>x<|assistant|><think>", "max_tokens": 120, "temperature": 0.8,
            "seed": seed, "ignore_eos": True, "stream": True, "stream_options": {"include_usage": True}}
    text, tokens = "", None
    with httpx.stream("POST", base_url + "/completions", json=body, timeout=300) as resp:
        assert resp.status_code == 200
        for line in resp.iter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            chunk = json.loads(line[6:])
            assert "error" not in chunk, chunk
            if chunk.get("usage"):
                tokens = chunk["usage"]["completion_tokens"]
            text += "".join(c["text"] for c in chunk["choices"])
    return text, tokens


def test_a_hundred_malformed_requests_get_openai_errors_while_valid_streams_go_on(live_server):
    cases = _cases()
    assert len(cases) >= 100
    alone = {seed: _stream_text(live_server.base_url, seed) for seed in (1, 2)}
    results: dict[int, tuple[str, int]] = {}
    streams = [threading.Thread(target=lambda s=s: results.__setitem__(s, _stream_text(live_server.base_url, s)))
               for s in (1, 2)]
    for t in streams:
        t.start()
    with httpx.Client(base_url=live_server.base_url, timeout=120) as http:
        for path, body in cases:
            if isinstance(body, bytes):
                resp = http.post(path, content=body, headers={"content-type": "application/json"})
            else:
                resp = http.post(path, json=body)
            _check_error(resp, body if isinstance(body, bytes) else json.dumps(body)[:200])
    for t in streams:
        t.join(timeout=300)
    assert results == alone and all(tokens == 120 for _, tokens in results.values())
