"""Reasoning effort: thinking budgets are enforced by forcing `</think>`, `none` forbids thinking."""

from __future__ import annotations

from inference.engine import Engine, EngineConfig, GenerateRequest, SamplingParams
from inference.engine.reasoning_budget import ReasoningState

from .conftest import make_prompt

START, END = 1009, 1010  # <think>, </think> in the checkpoint's tokenizer


def engine(ckpt, **overrides):
    cfg = dict(dtype="float32", kv_budget_tokens=1024, page_size=16, latent_norm_eps=1e-6,
               reasoning_budgets={"low": 3, "medium": 6})
    cfg.update(overrides)
    return Engine(ckpt, EngineConfig(**cfg))


def run(eng, prompt, effort, n=10):
    (res,) = eng.generate([GenerateRequest(prompt_ids=prompt, reasoning_effort=effort,
                                           params=SamplingParams(temperature=0, max_tokens=n, ignore_eos=True))])
    return res.token_ids


def thinking_tokens(out: list[int], prompt_open: bool) -> int:
    state = ReasoningState(None, START, END, [START] if prompt_open else [])
    for t in out:
        state.advance(t)
    return state.spent


def test_think_ids_come_from_the_tokenizer(engine_checkpoint):
    eng = engine(engine_checkpoint)
    assert (eng.think_start_id, eng.think_end_id) == (START, END)


def test_budgets_force_end_of_thinking(engine_checkpoint):
    eng = engine(engine_checkpoint)
    prompt = make_prompt(70, 20) + [START]  # the template opened <think>
    free = run(eng, prompt, None)
    assert END not in free[:6], "pick a prompt where the model keeps thinking on its own"
    assert run(eng, prompt, "max") == free
    low = run(eng, prompt, "low")
    assert low[:3] == free[:3] and low[3] == END and thinking_tokens(low, True) == 3
    medium = run(eng, prompt, "medium")
    assert medium[:6] == free[:6] and medium[6] == END and thinking_tokens(medium, True) == 6


def test_none_closes_an_open_think_immediately(engine_checkpoint):
    eng = engine(engine_checkpoint)
    out = run(eng, make_prompt(71, 20) + [START], "none")
    assert out[0] == END and START not in out


def test_none_never_opens_think(engine_checkpoint):
    prompt = make_prompt(72, 20)
    first = run(engine(engine_checkpoint), prompt, None, n=1)[0]
    # Declare the model's favourite next token to be <think>: `none` must steer around it.
    eng = engine(engine_checkpoint, think_start_id=first, think_end_id=END)
    out = run(eng, prompt, "none", n=8)
    assert first not in out
    assert run(eng, prompt, "max", n=1) == [first]


def test_spent_budget_forbids_reopening():
    state = ReasoningState(2, START, END, [START])
    for t in (5, 6):
        state.advance(t)
    assert state.forced_token() == END
    state.advance(END)
    assert state.forced_token() is None and state.banned_token() == START


def test_request_budget_overrides_the_effort_budget(engine_checkpoint):
    eng = engine(engine_checkpoint)
    prompt = make_prompt(70, 20) + [START]
    free = run(eng, prompt, None)
    (res,) = eng.generate([GenerateRequest(prompt_ids=prompt, reasoning_effort="medium", reasoning_budget=2,
                                           params=SamplingParams(temperature=0, max_tokens=10, ignore_eos=True))])
    out = res.token_ids
    assert out[:2] == free[:2] and out[2] == END and thinking_tokens(out, True) == 2
