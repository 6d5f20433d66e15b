"""Structured outputs on a random-weight checkpoint: forced tool calls always parse against their
schema, json_schema replies always validate (100 seeds each, batched as n=10 choices x 10
concurrent requests), json_object is an object, and a forced call may follow bounded thinking."""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor

import jsonschema
import openai
import pytest

MODEL = "glm-random"
USER = [{"role": "user", "content": "do it"}]
# Bounded types, so noise reaches the end of a call well within max_tokens.
EDIT_PARAMS = {"type": "object", "properties": {
    "path": {"type": "string", "maxLength": 12},
    "count": {"type": "integer", "minimum": 0, "maximum": 999},
    "mode": {"enum": ["read", "write", "append"]},
    "recursive": {"type": "boolean"},
    "tags": {"type": "array", "items": {"enum": ["a", "b"]}, "maxItems": 2}},
    "required": ["path", "count", "mode", "recursive"], "additionalProperties": False}
TOOLS = [{"type": "function", "function": {"name": "edit", "description": "Edit a file", "parameters": EDIT_PARAMS}},
         {"type": "function", "function": {"name": "wait", "description": "Wait", "parameters": {
             "type": "object", "properties": {"seconds": {"type": "integer", "minimum": 1, "maximum": 9}},
             "required": ["seconds"], "additionalProperties": False}}}]
SCHEMAS = {t["function"]["name"]: t["function"]["parameters"] for t in TOOLS}
ANSWER_SCHEMA = {"type": "object", "properties": {
    "answer": {"type": "string", "maxLength": 10},
    "score": {"type": "number", "minimum": 0, "maximum": 1},
    "ok": {"type": "boolean"},
    "kind": {"enum": ["x", "y"]},
    "items": {"type": "array", "items": {"type": "integer", "minimum": 0, "maximum": 9}, "maxItems": 3}},
    "required": ["answer", "ok", "kind"], "additionalProperties": False}


@pytest.fixture()
def rclient(random_server):
    with openai.OpenAI(base_url=random_server.base_url, api_key="unused", max_retries=0, timeout=300) as c:
        yield c


def _hundred(rclient, per_request=lambda k: {}, **kwargs) -> list:
    """100 choices with seeds 0..99 (seed + i per choice), as 10 concurrent n=10 requests;
    `per_request(k)` adds fields to request k."""
    def one(k):
        return rclient.chat.completions.create(model=MODEL, messages=USER, n=10, seed=10 * k, temperature=1.0,
                                               max_tokens=600, **kwargs, **per_request(k)).choices
    with ThreadPoolExecutor(10) as pool:
        return [(k, c) for k, choices in zip(range(10), pool.map(one, range(10))) for c in choices]


def _choice(k: int):
    """Half the seeds force a call to some tool, half name the one to call."""
    return {"tool_choice": "required" if k % 2 else {"type": "function", "function": {"name": "edit"}}}


def test_a_forced_tool_call_always_parses_against_its_schema(rclient):
    choices = _hundred(rclient, _choice, tools=TOOLS, parallel_tool_calls=False, reasoning_effort="none")
    assert len(choices) == 100
    for k, c in choices:
        assert c.finish_reason == "tool_calls", c
        assert len(c.message.tool_calls) == 1 and not c.message.model_extra.get("format_errors")
        call = c.message.tool_calls[0].function
        if not k % 2:
            assert call.name == "edit"
        jsonschema.validate(json.loads(call.arguments), SCHEMAS[call.name])


def test_json_schema_replies_always_validate(rclient):
    fmt = {"type": "json_schema", "json_schema": {"name": "answer", "schema": ANSWER_SCHEMA, "strict": True}}
    choices = _hundred(rclient, response_format=fmt, extra_body={"chat_template_kwargs": {"enable_thinking": False}})
    assert len(choices) == 100
    for _, c in choices:
        assert c.finish_reason == "stop", c
        jsonschema.validate(json.loads(c.message.content), ANSWER_SCHEMA)


def test_json_object_streams_one_object(rclient):
    chunks = list(rclient.chat.completions.create(
        model=MODEL, messages=USER, seed=4, max_tokens=200, stream=True, response_format={"type": "json_object"},
        reasoning_effort="none", logit_bias={}))
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    finish = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
    if finish == ["stop"]:  # noise may fill max_tokens inside an object; a finished one must parse
        assert isinstance(json.loads(text), dict)
    else:
        assert finish == ["length"] and text.lstrip().startswith("{")


def test_a_forced_call_streams_and_may_follow_bounded_thinking(rclient, random_server):
    # reasoning_effort "low" (16 tokens on this server): the engine ends thinking at its budget;
    # the call after it is constrained.
    stream = rclient.chat.completions.create(model=MODEL, messages=USER, tools=TOOLS, tool_choice="required",
                                             parallel_tool_calls=False, reasoning_effort="low", seed=7,
                                             temperature=1.0, max_tokens=2000, stream=True)
    chunks = list(stream)
    calls = [tc for c in chunks if c.choices for tc in c.choices[0].delta.tool_calls or []]
    reasoning = "".join(c.choices[0].delta.model_extra.get("reasoning") or "" for c in chunks if c.choices)
    assert reasoning and len(calls) == 1
    jsonschema.validate(json.loads(calls[0].function.arguments), SCHEMAS[calls[0].function.name])


def test_completions_take_a_response_format_too(random_server):
    import httpx

    body = {"model": MODEL, "prompt": "[gMASK]<sop><|user|>x<|assistant|></think>", "max_tokens": 400, "seed": 2,
            "response_format": {"type": "json_schema", "json_schema": {"name": "a", "schema": ANSWER_SCHEMA}}}
    choice = httpx.post(random_server.base_url + "/completions", json=body, timeout=300).json()["choices"][0]
    assert choice["finish_reason"] == "stop"
    jsonschema.validate(json.loads(choice["text"]), ANSWER_SCHEMA)


@pytest.mark.parametrize("body, param", [
    ({"response_format": {"type": "json_schema", "json_schema": {"name": "a", "schema": {"type": "objekt"}}}},
     "response_format"),
    ({"response_format": {"type": "json_schema"}}, "response_format"),
    ({"tools": TOOLS, "tool_choice": "required", "response_format": {"type": "json_object"}}, "response_format"),
    ({"tools": TOOLS, "tool_choice": {"type": "function", "function": {"name": "nope"}}}, "tool_choice.function.name"),
])
def test_constraints_that_cannot_be_built_are_400s(random_server, body, param):
    import httpx

    resp = httpx.post(random_server.base_url + "/chat/completions", timeout=60,
                      json={"model": MODEL, "messages": USER, **body})
    assert resp.status_code == 400, resp.text
    assert resp.json()["error"]["param"] == param, resp.text
