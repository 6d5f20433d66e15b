"""n > 1: several choices of one request, merged into one reply (streamed or not)."""

from __future__ import annotations

import json

import httpx

from .conftest import BASH_TOOL, SCRIPTED_REPLY

MODEL = "glm-tiny"
USER = [{"role": "user", "content": "hello"}]


def test_n_choices_non_streaming_are_indexed_seeded_and_counted_once(client, live_server):
    # With the scripted chain's tokens banned, the tiny model's next-token distribution is nearly
    # flat, so sampling really is random.
    tok = live_server.state.tokenizer
    chain = {*tok.encode(SCRIPTED_REPLY), tok.token_id("<think>"), tok.token_id("<|observation|>"), *tok.stop_token_ids}
    kw = dict(model=MODEL, prompt="zq", max_tokens=12, temperature=1.0, seed=7, n=3,
              logit_bias={str(t): -100 for t in chain})
    first = client.completions.create(**kw)
    again = client.completions.create(**kw)
    assert [c.index for c in first.choices] == [0, 1, 2]
    texts = [c.text for c in first.choices]
    assert len(set(texts)) == 3  # choice i samples with seed + i: distinct...
    assert texts == [c.text for c in again.choices]  # ...and reproducible
    single = client.completions.create(**{**kw, "n": 1})
    assert single.choices[0].text == texts[0]  # choice 0 is the plain seeded request
    assert first.usage.prompt_tokens == single.usage.prompt_tokens  # the prompt counts once
    assert first.usage.completion_tokens == 3 * 12
    chat = client.chat.completions.create(model=MODEL, messages=USER, max_tokens=40, temperature=0, n=2,
                                          tools=[BASH_TOOL])
    assert [c.index for c in chat.choices] == [0, 1]
    assert all(c.finish_reason == "tool_calls" for c in chat.choices)


def test_n_choices_stream_interleaved_with_one_usage_chunk_and_one_done(live_server):
    body = {"model": MODEL, "messages": USER, "max_tokens": 40, "temperature": 0, "n": 2, "tools": [BASH_TOOL],
            "stream": True, "stream_options": {"include_usage": True}}
    with httpx.stream("POST", live_server.base_url + "/chat/completions", json=body, timeout=120) as resp:
        lines = [l[6:] for l in resp.iter_lines() if l.startswith("data: ")]
    assert lines.count("[DONE]") == 1 and lines[-1] == "[DONE]"
    chunks = [json.loads(l) for l in lines[:-1]]
    assert len({c["id"] for c in chunks}) == 1
    usage = [c for c in chunks if c.get("usage")]
    assert len(usage) == 1 and usage[0]["choices"] == [] and usage[0] is chunks[-1]
    finishes = {}
    calls = {0: "", 1: ""}
    for c in chunks:
        for ch in c["choices"]:
            for call in ch["delta"].get("tool_calls") or []:
                calls[ch["index"]] += call["function"].get("arguments") or ""
            if ch["finish_reason"]:
                finishes[ch["index"]] = ch["finish_reason"]
    # Greedy on the scripted model: both choices make the same tool call.
    assert finishes == {0: "tool_calls", 1: "tool_calls"}
    assert json.loads(calls[0]) == json.loads(calls[1]) == {"command": "ls -la"}


def test_completions_with_n_and_n_with_a_session_is_refused(client, live_server):
    prompt = "[gMASK]<sop><|user|>x<|assistant|><think>"
    out = client.completions.create(model=MODEL, prompt=prompt, max_tokens=40, temperature=0, n=2)
    assert [c.index for c in out.choices] == [0, 1]
    assert [c.text for c in out.choices] == [SCRIPTED_REPLY, SCRIPTED_REPLY]
    streamed = {0: "", 1: ""}
    for chunk in client.completions.create(model=MODEL, prompt=prompt, max_tokens=40, temperature=0, n=2, stream=True):
        for c in chunk.choices:
            streamed[c.index] += c.text
    assert streamed == {0: SCRIPTED_REPLY, 1: SCRIPTED_REPLY}
    resp = httpx.post(live_server.base_url + "/chat/completions", timeout=60,
                      json={"model": MODEL, "messages": USER, "n": 2, "session_id": "s1"})
    assert resp.status_code == 400 and resp.json()["error"]["param"] == "n"
    stats = live_server.state.engine.stats()
    assert stats["running"] == 0 and stats["waiting"] == 0
