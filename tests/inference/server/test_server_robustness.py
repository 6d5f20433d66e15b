"""Bad requests get OpenAI-shaped 4xx/503 answers while good ones keep working; disconnects abort."""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor

import httpx
import openai
import pytest

from .conftest import BASH_TOOL, SCRIPTED_REPLY

MODEL = "glm-tiny"
USER = [{"role": "user", "content": "hello"}]


def _post(server, path: str, **kwargs) -> httpx.Response:
    return httpx.post(server.base_url + path, timeout=120, **kwargs)


def _assert_error(resp: httpx.Response, status: int, fragment: str) -> dict:
    assert resp.status_code == status, resp.text
    err = resp.json()["error"]
    assert set(err) == {"message", "type", "param", "code"} and fragment in err["message"], err
    return err


BAD_REQUESTS = [
    (b'{"model": "glm-tiny", "messages": [', 400, "malformed JSON"),
    ({"model": "glm-tiny", "messages": "hi"}, 400, "messages"),
    ({"model": "glm-tiny", "messages": USER, "temperature": "hot"}, 400, "temperature"),
    ({"model": "glm-tiny", "messages": USER, "max_tokens": -5}, 400, "max_tokens"),
    ({"model": "glm-tiny", "messages": [{"role": "wizard", "content": "x"}]}, 400, "messages.0"),
    ({"model": "glm-tiny", "messages": []}, 400, "messages"),
    ({"model": "glm-tiny", "messages": USER, "reasoning_effort": "extreme"}, 400, "reasoning_effort"),
    ({"model": "glm-tiny", "messages": USER, "tool_choice": "required"}, 400, "tool_choice"),
    ({"model": "glm-tiny", "messages": USER, "max_tokens": 10_000}, 400, "context"),
    ({"model": "glm-tiny", "messages": [{"role": "user", "content": "word " * 5000}]}, 400, "context"),
    ({"model": "gpt-4o", "messages": USER}, 404, "does not exist"),
    ({"model": "glm-tiny", "messages": USER, "response_format": {"type": "xml"}}, 400, "response_format.type"),
    ({"model": "glm-tiny", "messages": USER, "presence_penalty": 3}, 400, "presence_penalty"),
    ({"model": "glm-tiny", "messages": USER, "logit_bias": {"abc": 1}}, 400, "logit_bias"),
    ({"model": "glm-tiny", "messages": USER, "logit_bias": {"5": 250}}, 400, "logit_bias"),
    ({"model": "glm-tiny", "messages": USER, "logit_bias": {"999999": 5}}, 400, "outside the vocabulary"),
]


@pytest.mark.parametrize("body, status, fragment", BAD_REQUESTS)
def test_bad_requests_get_openai_errors(live_server, body, status, fragment):
    kwargs = {"content": body, "headers": {"content-type": "application/json"}} if isinstance(body, bytes) else {"json": body}
    _assert_error(_post(live_server, "/chat/completions", **kwargs), status, fragment)


def test_openai_client_raises_typed_errors(client):
    with pytest.raises(openai.NotFoundError):
        client.chat.completions.create(model="nope", messages=USER)
    with pytest.raises(openai.BadRequestError, match="context"):
        client.completions.create(model=MODEL, prompt=list(range(5000)))


def test_sixteen_concurrent_clients_while_bad_requests_fail(live_server):
    def good(i: int):
        with openai.OpenAI(base_url=live_server.base_url, api_key="x", max_retries=0, timeout=120) as c:
            stream = i % 2 == 0
            kwargs = dict(model=MODEL, messages=[{"role": "user", "content": f"client {i} says hi"}],
                          max_tokens=8, temperature=0.8, seed=i, extra_body={"ignore_eos": True})
            if stream:
                chunks = list(c.chat.completions.create(stream=True, **kwargs))
                return chunks[-1].choices[0].finish_reason
            return c.chat.completions.create(**kwargs).choices[0].finish_reason

    def bad(i: int):
        body = BAD_REQUESTS[i % len(BAD_REQUESTS)]
        kwargs = {"content": body[0], "headers": {"content-type": "application/json"}} if isinstance(body[0], bytes) else {"json": body[0]}
        return _post(live_server, "/chat/completions", **kwargs).status_code

    with ThreadPoolExecutor(max_workers=24) as pool:
        good_results = [pool.submit(good, i) for i in range(16)]
        bad_results = [pool.submit(bad, i) for i in range(8)]
        assert [f.result() for f in good_results] == ["length"] * 16
        assert all(400 <= f.result() < 500 for f in bad_results)
    assert live_server.state.inflight == 0


def test_overload_answers_503_and_recovers(client, live_server):
    state = live_server.state
    limit = state.max_inflight
    state.max_inflight = 0
    try:
        with pytest.raises(openai.APIStatusError) as info:
            client.chat.completions.create(model=MODEL, messages=USER, max_tokens=2, temperature=0)
        assert info.value.status_code == 503 and "overloaded" in str(info.value)
    finally:
        state.max_inflight = limit
    reply = client.chat.completions.create(model=MODEL, messages=USER, max_tokens=2, temperature=0)
    assert reply.choices[0].finish_reason == "length"


def _wait_idle(engine, timeout: float = 60.0) -> dict:
    deadline = time.monotonic() + timeout
    while True:
        stats = engine.stats()
        if stats["running"] == 0 and stats["waiting"] == 0:
            return stats
        assert time.monotonic() < deadline, f"engine still busy: {stats}"
        time.sleep(0.05)


@pytest.mark.parametrize("stream", [True, False])
def test_disconnect_aborts_the_request_and_frees_its_pages(live_server, stream):
    engine = live_server.state.engine
    before = _wait_idle(engine)
    max_tokens = 3000
    body = {"model": MODEL, "messages": [{"role": "user", "content": f"write a lot {stream}"}],
            "max_tokens": max_tokens, "temperature": 1.0, "stream": stream, "ignore_eos": True}
    with httpx.Client(timeout=120) as http:
        if stream:
            with http.stream("POST", live_server.base_url + "/chat/completions", json=body) as resp:
                lines = resp.iter_lines()
                got = [next(lines) for _ in range(6)]
                assert any(line.startswith("data: ") for line in got)
        else:
            with pytest.raises(httpx.ReadTimeout):
                http.post(live_server.base_url + "/chat/completions", json=body, timeout=1.0)
    after = _wait_idle(engine)
    # Aborted long before max_tokens: far fewer engine steps than tokens requested.
    assert after["steps"] - before["steps"] < max_tokens // 2
    # No pages stay held by a live request: every page is free or in the prefix cache.
    assert after["free_pages"] + after["device_cached_pages"] == after["total_pages"]
    assert live_server.state.inflight == 0


def test_completions_echo_penalties_and_logit_bias(client, live_server):
    prompt = "[gMASK]<sop><|user|>x<|assistant|><think>"
    echoed = client.completions.create(model=MODEL, prompt=prompt, max_tokens=40, temperature=0, echo=True)
    assert echoed.choices[0].text == prompt + SCRIPTED_REPLY
    streamed = "".join(c.choices[0].text for c in client.completions.create(
        model=MODEL, prompt=prompt, max_tokens=40, temperature=0, echo=True, stream=True) if c.choices)
    assert streamed == prompt + SCRIPTED_REPLY
    # The scripted chain starts with "Need"'s first token: banning it changes the reply, and
    # response_format text and zero penalties (what many clients send) change nothing.
    first = live_server.state.tokenizer.encode(SCRIPTED_REPLY)[0]
    banned = client.completions.create(model=MODEL, prompt=prompt, max_tokens=5, temperature=0,
                                       logit_bias={str(first): -100})
    assert not banned.choices[0].text.startswith(SCRIPTED_REPLY[:4])
    same = client.chat.completions.create(model=MODEL, messages=USER, max_tokens=40, temperature=0,
                                          presence_penalty=0, frequency_penalty=0, response_format={"type": "text"},
                                          tools=[BASH_TOOL])
    assert same.choices[0].message.tool_calls is not None


def test_completions_endpoint_with_stop_strings(client, live_server):
    prompt = "[gMASK]<sop><|user|>x<|assistant|><think>"
    full = client.completions.create(model=MODEL, prompt=prompt, max_tokens=40, temperature=0)
    assert full.choices[0].text == SCRIPTED_REPLY and full.choices[0].finish_reason == "stop"
    cut = client.completions.create(model=MODEL, prompt=prompt, max_tokens=40, temperature=0, stop=["Listing"])
    assert cut.choices[0].text == "Need files</think>"
    streamed = "".join(c.choices[0].text for c in client.completions.create(
        model=MODEL, prompt=prompt, max_tokens=40, temperature=0, stop=["arg_key>comm"], stream=True) if c.choices)
    assert streamed == SCRIPTED_REPLY.split("arg_key>comm")[0]
    ids = live_server.state.tokenizer.encode(prompt)
    assert client.completions.create(model=MODEL, prompt=ids, max_tokens=40, temperature=0).choices[0].text == SCRIPTED_REPLY
