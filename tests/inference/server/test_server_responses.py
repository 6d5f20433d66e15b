"""The Responses API through the official `openai` SDK against a live server (scripted checkpoint:
reasoning "Need files", text "Listing:", then a bash call)."""

from __future__ import annotations

import json

import openai
import pytest

from inference.chat.template import ChatTemplate

from .conftest import SCRIPTED_REPLY

MODEL = "glm-tiny"
BASH = {"type": "function", "name": "bash", "description": "Run a shell command",
        "parameters": {"type": "object", "properties": {"command": {"type": "string"}}, "required": ["command"]}}
CHAT_BASH = {"type": "function", "function": {k: v for k, v in BASH.items() if k != "type"}}


def _items(response) -> list[tuple]:
    out = []
    for item in response.output:
        if item.type == "reasoning":
            out.append(("reasoning", "".join(c.text for c in item.content)))
        elif item.type == "message":
            out.append(("message", "".join(c.text for c in item.content)))
        else:
            out.append((item.type, item.name, json.loads(item.arguments)))
    return out


EXPECTED = [("reasoning", "Need files"), ("message", "Listing:"), ("function_call", "bash", {"command": "ls -la"})]


def _prompt_len(server, messages, tools=None, **options) -> int:
    text = ChatTemplate(server.state.defaults.variant, **options).render(messages, tools)
    return len(server.state.tokenizer.encode(text))


def test_function_call_reply_and_usage(client, live_server):
    r = client.responses.create(model=MODEL, input="list the files", tools=[BASH], temperature=0,
                                instructions="You are terse.")
    assert r.status == "completed" and _items(r) == EXPECTED
    assert r.output_text == "Listing:"
    messages = [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "list the files"}]
    assert r.usage.input_tokens == _prompt_len(live_server, messages, [CHAT_BASH])
    reply_ids = live_server.state.tokenizer.encode(SCRIPTED_REPLY)
    assert r.usage.output_tokens == len(reply_ids) + 1  # + the <|observation|> stop token
    assert 0 < r.usage.output_tokens_details.reasoning_tokens < r.usage.output_tokens


def test_stream_events_and_final_response(client):
    kwargs = dict(model=MODEL, input="list the files", tools=[BASH], temperature=0)
    with client.responses.stream(**kwargs) as stream:
        kinds = [event.type for event in stream]
        final = stream.get_final_response()
    assert _items(final) == EXPECTED and final.status == "completed" and final.usage.output_tokens > 0
    assert kinds[:2] == ["response.created", "response.in_progress"] and kinds[-1] == "response.completed"
    squashed = [k for i, k in enumerate(kinds) if i == 0 or k != kinds[i - 1]]
    assert squashed[2:-1] == [
        "response.output_item.added", "response.reasoning_text.delta", "response.reasoning_text.done",
        "response.output_item.done",
        "response.output_item.added", "response.content_part.added", "response.output_text.delta",
        "response.output_text.done", "response.content_part.done", "response.output_item.done",
        "response.output_item.added", "response.function_call_arguments.delta",
        "response.function_call_arguments.done", "response.output_item.done",
    ]
    # The raw iterator (stream=True) parses into typed events too, numbered in order.
    events = list(client.responses.create(stream=True, **kwargs))
    assert [e.sequence_number for e in events] == list(range(len(events)))


def test_previous_response_id_continues_from_the_cache(client, live_server):
    first = client.responses.create(model=MODEL, input="list the files", tools=[BASH], temperature=0)
    call = first.output[-1]
    follow = [{"type": "function_call_output", "call_id": call.call_id, "output": "a.py\nb.py"}]
    second = client.responses.create(model=MODEL, previous_response_id=first.id, input=follow, tools=[BASH],
                                     temperature=0)
    assert _items(second) == EXPECTED and second.previous_response_id == first.id
    # The stored prompt + reply are reused whole, up to the partial last page.
    seen = first.usage.input_tokens + first.usage.output_tokens
    assert second.usage.input_tokens > seen
    assert second.usage.input_tokens_details.cached_tokens >= seen - 16
    # A second follow-up from the same response forks it again, with the same prompt.
    again = client.responses.create(model=MODEL, previous_response_id=first.id, input=follow, tools=[BASH],
                                    temperature=0)
    assert again.usage.input_tokens == second.usage.input_tokens
    # The same history sent in full (no previous_response_id) renders to the same length here.
    history = [{"role": "user", "content": "list the files"}, *[i.model_dump(exclude_none=True) for i in first.output],
               *follow]
    full = client.responses.create(model=MODEL, input=history, tools=[BASH], temperature=0, store=False)
    assert full.usage.input_tokens == second.usage.input_tokens
    with pytest.raises(openai.NotFoundError):
        client.responses.retrieve(full.id)  # store=False


def test_prompt_cache_key_keeps_a_session_for_full_histories(client):
    history: list = [{"role": "user", "content": "fix it"}]
    cached = []
    for turn in range(3):
        r = client.responses.create(model=MODEL, input=history, tools=[BASH], temperature=0, store=False,
                                    prompt_cache_key="codex-like-session")
        cached.append(r.usage.input_tokens_details.cached_tokens)
        history += [i.model_dump(exclude_none=True) for i in r.output]
        history.append({"type": "function_call_output", "call_id": r.output[-1].call_id, "output": f"out {turn}"})
    assert cached[1] > 0 and cached[2] > cached[1]


def test_retrieve_delete_and_limits(client):
    r = client.responses.create(model=MODEL, input="hi", temperature=0, max_output_tokens=3,
                                reasoning={"effort": "low"}, metadata={"k": "v"})
    assert r.status == "incomplete" and r.incomplete_details.reason == "max_output_tokens"
    assert r.usage.output_tokens == 3 and r.output[0].status == "incomplete"
    got = client.responses.retrieve(r.id)
    assert got.id == r.id and _items(got) == _items(r) and got.metadata == {"k": "v"}
    client.responses.delete(r.id)
    with pytest.raises(openai.NotFoundError):
        client.responses.retrieve(r.id)


def test_errors_keep_the_openai_shape(client):
    with pytest.raises(openai.NotFoundError, match="previous_response_id"):
        client.responses.create(model=MODEL, input="x", previous_response_id="resp_missing")
    with pytest.raises(openai.BadRequestError, match="hosted tool"):
        client.responses.create(model=MODEL, input="x", tools=[{"type": "web_search"}])
    with pytest.raises(openai.BadRequestError, match="tool_choice"):
        client.responses.create(model=MODEL, input="x", tool_choice="required")
    with pytest.raises(openai.BadRequestError, match="input.0.content.0"):
        client.responses.create(model=MODEL, input=[{"role": "user", "content": [
            {"type": "input_image", "image_url": "data:image/png;base64,AAAA"}]}])


def test_namespace_tools_are_flattened_and_calls_name_their_namespace(client):
    tools = [{"type": "namespace", "name": "shell_tools", "description": "Shell", "tools": [BASH]}]
    r = client.responses.create(model=MODEL, input="list the files", tools=tools, temperature=0)
    call = r.output[-1]
    assert (call.type, call.name, call.namespace) == ("function_call", "bash", "shell_tools")
    plain = client.responses.create(model=MODEL, input="list the files", tools=[BASH], temperature=0)
    assert plain.output[-1].namespace is None
    with pytest.raises(openai.BadRequestError, match="unique"):
        client.responses.create(model=MODEL, input="x", tools=[BASH, *tools])


def test_parallel_tool_calls_false_ends_the_reply_at_the_first_call(client):
    kwargs = dict(model=MODEL, input="list the files", tools=[BASH], temperature=0)
    free = client.responses.create(**kwargs)
    single = client.responses.create(parallel_tool_calls=False, **kwargs)
    assert _items(single) == _items(free) == EXPECTED and single.status == "completed"
    assert single.usage.output_tokens == free.usage.output_tokens - 1 and single.parallel_tool_calls is False
    # The stored ids end at </tool_call> (no stop token): the continuation still equals a fresh render.
    follow = [{"type": "function_call_output", "call_id": single.output[-1].call_id, "output": "a.py"}]
    chained = client.responses.create(previous_response_id=single.id, input=follow, parallel_tool_calls=False,
                                      **{k: v for k, v in kwargs.items() if k != "input"})
    history = [{"role": "user", "content": "list the files"},
               *[i.model_dump(exclude_none=True) for i in single.output], *follow]
    fresh = client.responses.create(model=MODEL, input=history, tools=[BASH], temperature=0, store=False)
    assert chained.usage.input_tokens == fresh.usage.input_tokens
    assert chained.usage.input_tokens_details.cached_tokens >= single.usage.input_tokens


def test_input_tokens_counts_the_prompt_a_create_would_run(client):
    kwargs = dict(input="list the files", tools=[BASH], instructions="Be terse.")
    counted = client.responses.input_tokens.count(model=MODEL, **kwargs)
    first = client.responses.create(model=MODEL, temperature=0, **kwargs)
    assert counted.input_tokens == first.usage.input_tokens and counted.object == "response.input_tokens"
    follow = [{"type": "function_call_output", "call_id": first.output[-1].call_id, "output": "a.py"}]
    chained = client.responses.input_tokens.count(previous_response_id=first.id, input=follow, tools=[BASH],
                                                   instructions="Be terse.")
    second = client.responses.create(model=MODEL, previous_response_id=first.id, input=follow, tools=[BASH],
                                     instructions="Be terse.", temperature=0)
    assert chained.input_tokens == second.usage.input_tokens
