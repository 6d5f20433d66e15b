"""OpenAI conformance (issue 14, items 1-8) with the official `openai` SDK and raw HTTP."""

from __future__ import annotations

import httpx
import openai
import pytest

from .conftest import BASH_TOOL

MODEL = "glm-tiny"
USER = [{"role": "user", "content": "list the files"}]


def _post(server, path: str, body: dict) -> httpx.Response:
    return httpx.post(server.base_url + path, json=body, timeout=120)


def test_streamed_chat_logprobs_arrive_with_every_chunk(client):
    stream = client.chat.completions.create(model=MODEL, messages=USER, temperature=0, max_tokens=40,
                                            logprobs=True, top_logprobs=3, stream=True)
    chunks = list(stream)
    streamed = [e for c in chunks for ch in c.choices if ch.logprobs for e in ch.logprobs.content]
    text_chunks = [ch for c in chunks for ch in c.choices if ch.delta.content or ch.delta.tool_calls
                   or getattr(ch.delta, "reasoning_content", None)]
    assert text_chunks and all(ch.logprobs is not None and ch.logprobs.content for ch in text_chunks)
    assert all(len(e.top_logprobs) == 3 and e.logprob <= 0 for e in streamed)
    whole = client.chat.completions.create(model=MODEL, messages=USER, temperature=0, max_tokens=40,
                                           logprobs=True, top_logprobs=3)
    assert [e.token for e in streamed] == [e.token for e in whole.choices[0].logprobs.content]
    assert [e.logprob for e in streamed] == pytest.approx([e.logprob for e in whole.choices[0].logprobs.content])


@pytest.mark.parametrize("stream", [False, True])
def test_the_sdks_own_assistant_message_goes_back_in(client, stream):
    first = client.chat.completions.create(model=MODEL, messages=USER, tools=[BASH_TOOL], temperature=0, max_tokens=40)
    dumped = first.choices[0].message.model_dump()  # refusal, function_call, audio, annotations, reasoning...
    assert {"refusal", "function_call", "audio", "annotations"} <= set(dumped)
    history = USER + [dumped, {"role": "tool", "tool_call_id": first.choices[0].message.tool_calls[0].id,
                               "content": "a.txt"}]
    reply = client.chat.completions.create(model=MODEL, messages=history, tools=[BASH_TOOL], temperature=0,
                                           max_tokens=8, stream=stream)
    if stream:
        assert list(reply)
    else:
        assert reply.choices[0].finish_reason in ("stop", "length", "tool_calls")


@pytest.mark.parametrize("stream", [False, True])
def test_the_servers_own_raw_reply_with_format_errors_goes_back_in(live_server, stream):
    first = _post(live_server, "/chat/completions", {"model": MODEL, "messages": USER, "max_tokens": 30, "seed": 3})
    message = first.json()["choices"][0]["message"]
    message["format_errors"] = message.get("format_errors") or ["text after a tool call"]
    second = _post(live_server, "/chat/completions", {"model": MODEL, "max_tokens": 4, "stream": stream,
                                                      "messages": USER + [message, {"role": "user", "content": "again"}]})
    assert second.status_code == 200, second.text
    assert ("data: [DONE]" in second.text) == stream


def test_unknown_keys_in_a_message_are_ignored(live_server):
    messages = [{"role": "user", "content": "hi", "x_custom": 1, "cache_control": {"type": "ephemeral"}}]
    assert _post(live_server, "/chat/completions", {"model": MODEL, "messages": messages, "max_tokens": 2}).status_code == 200


@pytest.mark.parametrize("path, extra", [("/chat/completions", {"messages": USER}), ("/completions", {"prompt": "x"})])
@pytest.mark.parametrize("stream", [None, True])
def test_explicit_nulls_mean_the_default(live_server, path, extra, stream):
    body = {"model": MODEL, "max_tokens": 3, "n": None, "stream": stream, "temperature": None, "stop": None,
            "seed": None, "logprobs": None, "stream_options": None, "top_logprobs": None, **extra}
    if path == "/completions":
        body["echo"] = None
    resp = _post(live_server, path, body)
    assert resp.status_code == 200, resp.text
    if stream:
        assert resp.text.rstrip().endswith("data: [DONE]")
    else:
        assert len(resp.json()["choices"]) == 1


def test_an_explicit_null_is_not_reported_as_missing(live_server):
    err = _post(live_server, "/chat/completions", {"model": None, "messages": USER}).json()["error"]
    assert err["param"] == "model" and "got null" in err["message"], err
    err = _post(live_server, "/chat/completions", {"messages": USER}).json()["error"]
    assert err["param"] == "model" and "got missing" in err["message"], err


def test_developer_role_is_a_system_message(live_server):
    from inference.chat.template import ChatTemplate

    def prompt_tokens(role):
        body = {"model": MODEL, "max_tokens": 1, "messages": [{"role": role, "content": "be brief"}] + USER}
        return _post(live_server, "/chat/completions", body).json()["usage"]["prompt_tokens"]

    expected = len(live_server.state.tokenizer.encode(ChatTemplate(live_server.state.defaults.variant).render(
        [{"role": "system", "content": "be brief"}] + USER)))
    assert prompt_tokens("developer") == prompt_tokens("system") == expected


def test_reasoning_is_sent_under_both_names_and_accepted_under_either(client, live_server):
    reply = client.chat.completions.create(model=MODEL, messages=USER, tools=[BASH_TOOL], temperature=0, max_tokens=40)
    extra = reply.choices[0].message.model_extra
    assert extra["reasoning"] == extra["reasoning_content"] == "Need files"
    chunks = list(client.chat.completions.create(model=MODEL, messages=USER, tools=[BASH_TOOL], temperature=0,
                                                 max_tokens=40, stream=True))
    deltas = [c.choices[0].delta.model_extra for c in chunks if c.choices and c.choices[0].delta.model_extra]
    assert "".join(d.get("reasoning", "") for d in deltas) == "".join(d.get("reasoning_content", "") for d in deltas) == "Need files"
    for key in ("reasoning", "reasoning_content"):
        body = {"model": MODEL, "max_tokens": 1, "messages": USER + [
            {"role": "assistant", "content": "Listing.", key: "Need files"}, {"role": "user", "content": "more"}]}
        assert _post(live_server, "/chat/completions", body).json()["usage"]["prompt_tokens"] == \
            _post(live_server, "/chat/completions", {**body, "messages": [
                *USER, {"role": "assistant", "content": "Listing.", "reasoning_content": "Need files"},
                {"role": "user", "content": "more"}]}).json()["usage"]["prompt_tokens"]


@pytest.mark.parametrize("stream", [False, True])
def test_completions_echo_logprobs_cover_the_prompt_and_offsets_index_the_text(client, live_server, stream):
    tok = live_server.state.tokenizer
    prompt = "[gMASK]<sop><|user|>x<|assistant|><think>"
    kwargs = dict(model=MODEL, prompt=prompt, max_tokens=6, temperature=0, echo=True, logprobs=2)
    if stream:
        chunks = list(client.completions.create(**kwargs, stream=True))
        text = "".join(c.choices[0].text for c in chunks if c.choices)
        lp = {k: [v for c in chunks if c.choices and c.choices[0].logprobs
                  for v in getattr(c.choices[0].logprobs, k)] for k in ("tokens", "token_logprobs", "text_offset")}
    else:
        choice = client.completions.create(**kwargs).choices[0]
        text, lp = choice.text, {k: getattr(choice.logprobs, k) for k in ("tokens", "token_logprobs", "text_offset")}
    n_prompt = len(tok.encode(prompt))
    assert text.startswith(prompt)
    assert lp["token_logprobs"][0] is None and all(v is not None for v in lp["token_logprobs"][1:])
    assert len(lp["tokens"]) >= n_prompt + 1 and "".join(lp["tokens"][:n_prompt]) == prompt
    for token, offset in zip(lp["tokens"], lp["text_offset"]):
        assert text[offset:offset + len(token)] == token or offset == len(text)  # the stop token is not in text
    assert lp["text_offset"][n_prompt] == len(prompt)


def test_prompt_logprobs_agree_with_the_logprobs_of_generation(live_server):
    from inference.engine.request import GenerateRequest
    from inference.engine.sampling_params import SamplingParams

    tok, engine = live_server.state.tokenizer, live_server.state.engine
    ids = tok.encode("[gMASK]<sop><|user|>hello there<|assistant|>")
    gen = engine.submit(GenerateRequest(prompt_ids=ids, params=SamplingParams(temperature=0, max_tokens=1, logprobs=2))).result()
    scored = engine.prompt_logprobs(ids + gen.token_ids, 2)
    assert scored[0] is None and len(scored) == len(ids) + 1
    assert scored[-1].token_id == gen.token_ids[0]
    assert scored[-1].logprob == pytest.approx(gen.logprobs[0].logprob, abs=1e-4)
    assert [t for t, _ in scored[-1].top] == [t for t, _ in gen.logprobs[0].top]


def test_top_logprobs_without_logprobs_is_refused(client):
    with pytest.raises(openai.BadRequestError, match="top_logprobs"):
        client.chat.completions.create(model=MODEL, messages=USER, top_logprobs=2)
    with pytest.raises(openai.BadRequestError, match="top_logprobs"):
        client.chat.completions.create(model=MODEL, messages=USER, top_logprobs=2, logprobs=False)


def test_unknown_top_level_fields_are_refused_by_name_and_openais_own_are_accepted(live_server):
    err = _post(live_server, "/chat/completions", {"model": MODEL, "messages": USER, "temprature": 0.5,
                                                   "frobnicate": 1}).json()["error"]
    assert err["param"] == "temprature" and "temprature" in err["message"] and "frobnicate" in err["message"]
    ok = {"model": MODEL, "messages": USER, "max_tokens": 2, "user": "u1", "metadata": {"k": "v"}, "store": False,
          "service_tier": "auto", "safety_identifier": "s", "prompt_cache_key": "p", "parallel_tool_calls": True,
          "prediction": None, "verbosity": "low", "modalities": ["text"], "audio": None, "functions": None}
    assert _post(live_server, "/chat/completions", ok).status_code == 200
    err = _post(live_server, "/chat/completions", {"model": MODEL, "messages": USER, "modalities": ["audio"]}).json()["error"]
    assert err["param"] == "modalities"
    err = _post(live_server, "/completions", {"model": MODEL, "prompt": "x", "suffix": "y"}).json()["error"]
    assert err["param"] == "suffix"
