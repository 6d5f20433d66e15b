"""Backends made through one `EnginePool` share the loaded engine, never a conversation."""

from __future__ import annotations

import threading

import pytest

from agent.backends import BackendError, EnginePool, make_backend
from agent.config import AgentConfig
from inference.chat.messages import Message, ToolSpec

ENGINE = {"dtype": "float32", "kv_budget_tokens": 4096, "page_size": 16}
FINISH = ToolSpec(name="finish", description="end the task", parameters={"type": "object", "properties": {}})


def test_two_backends_share_one_engine_with_independent_conversations(tiny_checkpoint):
    config = AgentConfig(embedded={"max_new_tokens": 6, "seed": 0, "engine": ENGINE})
    pool = EnginePool()
    first = make_backend(f"embedded:{tiny_checkpoint}", config, pool)
    second = make_backend(f"embedded:{tiny_checkpoint}", config, pool)
    assert first is not second and first.engine is second.engine
    assert pool.stats() == {"loads": 1, "engines": 1}
    engine = first.engine
    loop = engine._thread
    assert loop is not None and loop.is_alive()  # one step loop batches both backends' requests

    prompts = {first: "Fix the parser bug.", second: "Write a haiku about caches, then stop."}
    replies, errors = {}, []
    gate = threading.Barrier(2)

    def two_turns(backend) -> None:
        try:
            messages = [Message.system("You are terse."), Message.user(prompts[backend])]
            gate.wait()
            for _ in range(2):
                reply = backend.complete(messages, [FINISH]).message
                messages = [*messages, reply, Message.user("Go on.")]
            replies[backend] = messages
        except Exception as exc:  # surfaced below: a thread's failure must fail the test
            errors.append(exc)

    threads = [threading.Thread(target=two_turns, args=(b,)) for b in (first, second)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    for backend in (first, second):
        kept = backend.conversation.messages
        assert kept[1] == Message.user(prompts[backend])  # each kept only its own history
        assert kept == replies[backend][: len(kept)]
    assert first.session_id != second.session_id
    assert first.conversation is not second.conversation

    first.close()  # a shared engine outlives its backends until the pool's owner closes it
    assert loop.is_alive() and second.complete([Message.user("hi")], []).message is not None
    second.close()
    pool.close()
    assert not loop.is_alive() and engine._thread is None
    with pytest.raises(BackendError, match="pool is closed"):
        make_backend(f"embedded:{tiny_checkpoint}", config, pool)


def test_different_engine_settings_load_separately_and_a_private_backend_owns_its_engine(tiny_checkpoint):
    with EnginePool() as pool:
        small = AgentConfig(embedded={"engine": ENGINE})
        other = AgentConfig(embedded={"engine": {**ENGINE, "kv_budget_tokens": 2048}})
        a = make_backend(f"embedded:{tiny_checkpoint}", small, pool)
        b = make_backend(f"embedded:{tiny_checkpoint}", other, pool)
        assert a.engine is not b.engine and pool.stats() == {"loads": 2, "engines": 2}
        private = make_backend(f"embedded:{tiny_checkpoint}", small)
        assert private.engine is not a.engine and pool.stats()["loads"] == 2
        private.close()
    assert pool.stats() == {"loads": 2, "engines": 0}
