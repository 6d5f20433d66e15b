"""Chat completions through the official openai client against a live server."""

from __future__ import annotations

import json

from inference.chat.template import ChatTemplate
from inference.tokenizer import Tokenizer

from .conftest import BASH_TOOL, SCRIPTED_REPLY

MODEL = "glm-tiny"
USER = [{"role": "user", "content": "list the files"}]


def _reply_tokens(server) -> int:
    """The scripted reply plus its <|observation|> stop token."""
    return len(server.state.tokenizer.encode(SCRIPTED_REPLY)) + 1


def _prompt_len(server, messages, tools=None, **options) -> int:
    tok: Tokenizer = server.state.tokenizer
    template = ChatTemplate(server.state.defaults.variant, **options)
    return len(tok.encode(template.render(messages, tools)))


def test_models_and_health(client, live_server):
    models = client.models.list()
    assert [m.id for m in models.data] == [MODEL]
    import httpx

    health = httpx.get(live_server.base_url.removesuffix("/v1") + "/health").json()
    assert health["status"] == "ok" and health["engine"]["total_pages"] > 0


def test_tool_call_round_trip(client, live_server):
    first = client.chat.completions.create(model=MODEL, messages=USER, tools=[BASH_TOOL], temperature=0, max_tokens=40)
    choice = first.choices[0]
    assert choice.finish_reason == "tool_calls"
    msg = choice.message
    assert (msg.content, msg.reasoning_content) == ("Listing:", "Need files")
    assert [(c.function.name, json.loads(c.function.arguments)) for c in msg.tool_calls] == [("bash", {"command": "ls -la"})]
    assert first.usage.prompt_tokens == _prompt_len(live_server, USER, [BASH_TOOL])
    history = USER + [msg.model_dump(exclude_none=True),
                      {"role": "tool", "tool_call_id": msg.tool_calls[0].id, "content": "a.py\nb.py"}]
    second = client.chat.completions.create(model=MODEL, messages=history, tools=[BASH_TOOL], temperature=0, max_tokens=40)
    assert second.choices[0].message.tool_calls[0].function.name == "bash"
    # The tool result was rendered into the prompt: ours and the server's agree on its length.
    assert second.usage.prompt_tokens == _prompt_len(live_server, history, [BASH_TOOL])


def test_streaming_matches_non_streaming(client, live_server):
    kwargs = dict(model=MODEL, messages=USER, tools=[BASH_TOOL], temperature=0, max_tokens=40)
    whole = client.chat.completions.create(**kwargs).choices[0]
    reasoning, content, calls, finish, usage = "", "", [], None, None
    for chunk in client.chat.completions.create(stream=True, stream_options={"include_usage": True}, **kwargs):
        if chunk.usage is not None:
            usage = chunk.usage
        for ch in chunk.choices:
            reasoning += getattr(ch.delta, "reasoning_content", None) or ""
            content += ch.delta.content or ""
            calls += [(c.function.name, json.loads(c.function.arguments)) for c in ch.delta.tool_calls or []]
            finish = ch.finish_reason or finish
    assert (reasoning, content, finish) == (whole.message.reasoning_content, whole.message.content, "tool_calls")
    assert calls == [("bash", {"command": "ls -la"})]
    assert usage is not None and usage.completion_tokens == _reply_tokens(live_server)


def test_cached_tokens_grow_across_turns_of_one_session(client, live_server):
    messages, cached, prompts = list(USER), [], []
    for turn in range(4):
        reply = client.chat.completions.create(
            model=MODEL, messages=messages, tools=[BASH_TOOL], temperature=0, max_tokens=40,
            extra_headers={"X-Session-Id": "session-growth"},
        )
        cached.append(reply.usage.prompt_tokens_details.cached_tokens)
        prompts.append(reply.usage.prompt_tokens)
        msg = reply.choices[0].message
        messages += [msg.model_dump(exclude_none=True),
                     {"role": "tool", "tool_call_id": msg.tool_calls[0].id, "content": f"output {turn}"}]
    assert all(b > a for a, b in zip(cached, cached[1:])), cached
    # Everything but the partial last page of the previous prompt + reply is reused.
    page = 16
    for prev_prompt, now in zip(prompts, cached[1:]):
        assert now >= prev_prompt + _reply_tokens(live_server) - 2 * page


def test_thinking_off_and_forced_tool_choice(client, live_server):
    off = client.chat.completions.create(
        model=MODEL, messages=USER, tools=[BASH_TOOL], temperature=0, max_tokens=40,
        extra_body={"chat_template_kwargs": {"enable_thinking": False}},
    ).choices[0].message
    # The prompt ends in </think>, so the script continues with the answer and the call.
    assert off.reasoning_content is None and off.content == "Listing:" and off.tool_calls[0].function.name == "bash"
    forced = client.chat.completions.create(
        model=MODEL, messages=USER, tools=[BASH_TOOL], temperature=0, max_tokens=40,
        tool_choice={"type": "function", "function": {"name": "bash"}},
    ).choices[0]
    assert forced.finish_reason == "tool_calls" and not forced.message.content
    assert json.loads(forced.message.tool_calls[0].function.arguments) == {"command": "ls -la"}


def test_tool_choice_none_leaves_markup_in_content(client):
    msg = client.chat.completions.create(model=MODEL, messages=USER, tools=[BASH_TOOL], temperature=0,
                                         max_tokens=40, tool_choice="none").choices[0].message
    assert msg.tool_calls is None and msg.content.startswith("Listing:<tool_call>bash<arg_key>command")


def test_reasoning_effort_reaches_the_template(client, live_server):
    reply = client.chat.completions.create(model=MODEL, messages=USER, temperature=0, max_tokens=4,
                                           reasoning_effort="low")
    assert reply.usage.prompt_tokens == _prompt_len(live_server, USER, reasoning_effort="low")
    assert reply.choices[0].finish_reason == "length"


def test_sampled_output_respects_max_tokens_and_seed(client):
    kwargs = dict(model=MODEL, messages=[{"role": "user", "content": "random text please"}], temperature=1.0,
                  max_tokens=6, seed=1234)
    a, b = client.chat.completions.create(**kwargs), client.chat.completions.create(**kwargs)
    assert a.usage.completion_tokens <= 6
    assert a.choices[0].message.reasoning_content == b.choices[0].message.reasoning_content


def test_logprobs_in_chat_and_completions(client):
    chat = client.chat.completions.create(model=MODEL, messages=USER, max_tokens=4, temperature=0,
                                          logprobs=True, top_logprobs=2)
    content = chat.choices[0].logprobs.content
    assert [c.token for c in content] == ["N", "e", "ed", " fil"]  # the scripted greedy path
    assert all(len(c.top_logprobs) == 2 and c.top_logprobs[0].token == c.token for c in content)
    text = client.completions.create(model=MODEL, prompt="hello", max_tokens=3, temperature=0, logprobs=1).choices[0]
    assert len(text.logprobs.tokens) == 3 and "".join(text.logprobs.tokens) == text.text
    assert text.logprobs.text_offset == [0, len(text.logprobs.tokens[0]), len("".join(text.logprobs.tokens[:2]))]
