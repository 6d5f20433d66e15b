"""Sessions keep the conversation as ids: the next prompt extends the last prompt + reply exactly,
even where a from-scratch render would differ (here: JSON the model typed without spaces)."""

from __future__ import annotations

from inference.chat.conversation import first_difference
from inference.chat.template import ChatTemplate
from inference.server.prompting import ServerDefaults, prepare_chat
from inference.server.protocol import ChatCompletionRequest
from inference.server.replies import ChatReply
from inference.server.sessions import SessionStore
from inference.chat.parser import StreamingParser
from inference.tokenizer import Tokenizer
from inference.tokenizer_training import write_tokenizer_files

TOOL = {"type": "function", "function": {"name": "edit", "description": "Edit", "parameters": {
    "type": "object", "properties": {"path": {"type": "string"}, "lines": {"type": "array"}}}}}
MODEL_OUTPUT = ("plan</think>On it.<tool_call>edit<arg_key>path</arg_key><arg_value>a.py</arg_value>"
                "<arg_key>lines</arg_key><arg_value>[1,2]</arg_value></tool_call><|observation|>")


def _request(messages, **extra) -> ChatCompletionRequest:
    return ChatCompletionRequest(model="m", messages=messages, tools=[TOOL], **extra)


def _reply(tok: Tokenizer, prepared, ids: list[int]) -> dict:
    parser = StreamingParser(prepared.tools, start_in_reasoning=prepared.start_in_reasoning)
    reply = ChatReply("m")
    for ev in parser.feed(tok.decode(ids)) + parser.finish():
        reply.add(ev)
    return reply


def _turn(tok, store, messages, session_id, **extra):
    prepared = prepare_chat(_request(messages, **extra), tok, ServerDefaults(), store, session_id)
    generated = tok.encode(MODEL_OUTPUT)
    reply = _reply(tok, prepared, generated)
    if prepared.conversation is not None:
        prepared.conversation.add_generated(generated, reply.message())
        store.put(session_id, prepared.fingerprint, prepared.conversation)
    echoed = reply.message().to_openai()
    return prepared.prompt_ids, generated, echoed


def test_session_prompt_extends_previous_prompt_and_reply(tmp_path):
    write_tokenizer_files(tmp_path)
    tok, store = Tokenizer.from_pretrained(tmp_path), SessionStore()
    messages = [{"role": "user", "content": "fix a.py"}]
    prompt1, gen1, echoed = _turn(tok, store, messages, "s1")
    assert echoed["tool_calls"][0]["function"]["arguments"] == '{"path": "a.py", "lines": [1, 2]}'
    messages += [echoed, {"role": "tool", "tool_call_id": echoed["tool_calls"][0]["id"], "content": "done"}]

    prompt2, _, _ = _turn(tok, store, messages, "s1")
    assert prompt2[: len(prompt1) + len(gen1)] == prompt1 + gen1

    # Without the session the history is re-rendered: "[1, 2]" instead of the "[1,2]" the model wrote.
    scratch, _, _ = _turn(tok, SessionStore(), messages, None)
    diverge = first_difference(scratch, prompt1 + gen1)
    assert diverge is not None and diverge > len(prompt1)
    assert tok.decode(scratch[diverge - 4 :]).split("</arg_value>")[0].endswith("[1, 2]")


def test_session_restarts_when_history_or_options_change(tmp_path):
    write_tokenizer_files(tmp_path)
    tok, store = Tokenizer.from_pretrained(tmp_path), SessionStore()
    messages = [{"role": "user", "content": "fix a.py"}]
    prompt1, gen1, echoed = _turn(tok, store, messages, "s2")
    edited = [{"role": "user", "content": "fix b.py"}, echoed, {"role": "tool", "tool_call_id": "x", "content": "ok"}]
    prompt2, _, _ = _turn(tok, store, edited, "s2")
    assert prompt2 == tok.encode(ChatTemplate("glm-5.2").render(edited, [TOOL]))
    # A different reasoning effort changes the template: no continuation either.
    follow = edited + [{"role": "user", "content": "thanks"}]
    prompt3, _, _ = _turn(tok, store, follow, "s2", reasoning_effort="low")
    assert prompt3 == tok.encode(ChatTemplate("glm-5.2", reasoning_effort="low").render(follow, [TOOL]))
