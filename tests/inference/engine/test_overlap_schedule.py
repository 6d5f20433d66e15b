"""Overlap scheduling (inference/engine/overlap.py) generates what serial steps generate.

Every test runs the same requests through an engine with `overlap_schedule=True` (on a CPU the
forward runs on a worker thread) and one with it off, and compares tokens, finish reasons, usage
and logprobs: greedy and seeded sampling, concurrent requests finishing by max_tokens, stop
tokens and stop strings at different steps, prefix hits, preemption under a tiny KV budget, aborts
mid-stream. Afterwards no page leaks and the prefix cache holds only tokens that were emitted.
"""

from __future__ import annotations

import pytest

from inference.engine import Engine, EngineConfig, GenerateRequest, SamplingParams
from inference.engine.forward_launcher import ForwardLauncher
from inference.grammar.spec import GrammarSpec
from inference.host_syncs import HostSyncCounter

from .conftest import make_prompt
from .mixed_requests import assert_pool_drained

PS = 16
THINK_START, THINK_END = 1009, 1010  # <think>, </think> in the tiny checkpoint's tokenizer
STOP_IDS = make_prompt(77, 40)  # ~7% of the tiny vocabulary: stop tokens hit at various steps


def _detok(ids: list[int]) -> str:
    return " ".join(f"<{t}>" for t in ids)


def _engine(ckpt, overlap: bool, **overrides) -> Engine:
    cfg = dict(dtype="float32", kv_budget_tokens=2048, page_size=PS, max_running=8, overlap_schedule=overlap)
    cfg.update(overrides)
    return Engine(ckpt, EngineConfig(**cfg), detokenize=_detok)


@pytest.fixture(scope="module")
def module_engines(engine_checkpoint):
    return {flag: _engine(engine_checkpoint, flag) for flag in (False, True)}


@pytest.fixture
def engines(module_engines):
    """The module's two engines (overlap off / on), each test starting from an empty cache."""
    for eng in module_engines.values():
        eng.clear_cache()
    return module_engines


def _params(i: int, **kw) -> SamplingParams:
    """Greedy and seeded rows (top-k / top-p / min-p), some with logprobs, finishing by max_tokens,
    stop tokens or a stop string ("<3" ends at any token whose id starts with 3)."""
    base = dict(max_tokens=6 + 5 * (i % 4), ignore_eos=i % 5 != 0, logprobs=2 if i % 2 else None)
    if i % 3:
        base.update(temperature=0.9, seed=100 + i, top_k=(0, 40)[i % 2], top_p=(1.0, 0.9)[i % 3 == 2],
                    min_p=0.02 if i % 4 == 1 else 0.0)  # fmt: skip
    else:
        base.update(temperature=0.0)
    if i % 4 == 1:
        base["stop_token_ids"] = STOP_IDS
    if i % 4 == 2:
        base["stop"] = ["<3"]
    base.update(kw)
    return SamplingParams(**base)


def _outputs(results) -> list:
    return [(r.token_ids, r.finish_reason, r.stop_reason, r.usage) for r in results]


def _logprobs(results) -> list:
    return [[(lp.token_id, lp.logprob, lp.top) for lp in r.logprobs or []] for r in results]


def _assert_logprobs_close(got, expected, tol: float) -> None:
    """Same tokens and alternatives; values within `tol` (0: bit for bit)."""
    got, expected = _logprobs(got), _logprobs(expected)
    assert [[(t, [i for i, _ in top]) for t, _, top in r] for r in got] == \
        [[(t, [i for i, _ in top]) for t, _, top in r] for r in expected]
    values = lambda rs: [v for r in rs for _, lp, top in r for v in [lp, *(x for _, x in top)]]  # noqa: E731
    assert max((abs(a - b) for a, b in zip(values(got), values(expected))), default=0.0) <= tol


def _tree_paths(cache) -> list[tuple]:
    """Every root-to-node token path in the radix tree (tails included)."""
    out, todo = [], [(cache.root, ())]
    while todo:
        node, path = todo.pop()
        path = path + tuple(node.key)
        out.append(path + (tuple(node.tail.tokens) if node.tail is not None else ()))
        todo.extend((child, path) for child in node.children.values())
    return out


def _assert_clean(eng: Engine, emitted: list[list[int]]) -> None:
    """No page leaked; the cache holds no token that was not emitted (prompt + streamed output)."""
    assert_pool_drained(eng.stats())
    for path in _tree_paths(eng.prefix_cache):
        assert any(tuple(seq[:len(path)]) == path for seq in emitted), path
    eng.clear_cache()
    assert eng.allocator.num_free == eng.num_device_pages


def _waves(eng: Engine) -> tuple[list, list[list[int]]]:
    """Two waves of concurrent requests; the second reuses the first's prompts (prefix hits)."""
    first = [make_prompt(300 + i, 12 + 9 * i) for i in range(4)]
    second = [first[1][:20] + make_prompt(310, 7), first[2] + make_prompt(311, 3), make_prompt(312, 5),
              first[3][:33] + make_prompt(313, 12), make_prompt(314, 40)]  # fmt: skip
    results, emitted = [], []
    for wave, offset in ((first, 0), (second, 10)):
        reqs = [GenerateRequest(prompt_ids=p, params=_params(offset + i)) for i, p in enumerate(wave)]
        got = eng.generate(reqs)
        results += got
        emitted += [p + r.token_ids for p, r in zip(wave, got)]
    return results, emitted


def test_overlap_generates_what_serial_steps_generate(engines):
    serial, serial_emitted = _waves(engines[False])
    eng = engines[True]
    launched_before = eng.overlap.steps["chained"]
    got, emitted = _waves(eng)
    assert _outputs(got) == _outputs(serial)
    _assert_logprobs_close(got, serial, 1e-5)  # float rounding where a stopped row was computed (overlap.py)
    assert eng.overlap.steps["chained"] - launched_before > 20  # steps really overlapped
    assert {r.finish_reason for r in got} == {"length", "stop"}
    stops = {type(r.stop_reason) for r in got if r.finish_reason == "stop"}
    assert stops == {int, str}  # stop tokens and the stop string both ended requests
    assert sum(r.usage.cached_tokens for r in got) >= 16 + 32  # the prefix hits happened
    _assert_clean(eng, emitted)
    _assert_clean(engines[False], serial_emitted)


def test_max_tokens_finishes_compute_the_same_batches_bit_for_bit(engines):
    """Finishing by max_tokens is known when the next step is launched: those rows are left out,
    every batch is the serial one, and logprobs match exactly."""
    prompts = [make_prompt(320 + i, 5 + 11 * i) for i in range(5)]
    reqs = lambda: [GenerateRequest(prompt_ids=p, params=SamplingParams(temperature=0.0, max_tokens=3 + 4 * i, logprobs=3,
                                                                         ignore_eos=True))
                    for i, p in enumerate(prompts)]  # fmt: skip
    serial = engines[False].generate(reqs())
    got = engines[True].generate(reqs())
    assert _outputs(got) == _outputs(serial) and _logprobs(got) == _logprobs(serial)
    _assert_clean(engines[True], [p + r.token_ids for p, r in zip(prompts, got)])


def test_aborts_mid_stream_emit_and_count_only_what_was_streamed(engines):
    """The request aborted after k streamed tokens is in the step already launched: that row is
    dropped; it reports exactly k tokens, the others are unchanged."""
    prompts = [make_prompt(330 + i, 9 + 6 * i) for i in range(3)]
    outs = {}
    for flag, eng in engines.items():
        handles = [eng.submit(GenerateRequest(prompt_ids=p, request_id=f"a{i}", params=SamplingParams(
            temperature=0.0, max_tokens=12, ignore_eos=True))) for i, p in enumerate(prompts)]  # fmt: skip
        streamed = []
        for delta in handles[1]:
            streamed += delta.token_ids
            if len(streamed) >= 4 and delta.finish_reason is None:
                eng.abort("a1")
        results = [h.result() for h in handles]
        assert results[1].finish_reason == "abort"
        assert results[1].token_ids == streamed and results[1].usage.completion_tokens == len(streamed) == 4
        outs[flag] = results
        _assert_clean(eng, [p + r.token_ids for p, r in zip(prompts, results)])
    assert _outputs(outs[True]) == _outputs(outs[False])


def test_the_background_loop_overlaps_and_shuts_down_cleanly(engines):
    """The server's path: the engine's own thread steps; requests arrive while steps are in flight."""
    reqs = lambda: [GenerateRequest(prompt_ids=make_prompt(370 + i, 6 + 8 * i), request_id=f"b{i}",  # noqa: E731
                                    params=_params(i, max_tokens=10)) for i in range(4)]  # fmt: skip
    expected = engines[False].generate(reqs())
    eng = engines[True]
    chained = eng.overlap.steps["chained"]
    with eng:
        handles = [eng.submit(r) for r in reqs()]
        got = [h.result() for h in handles]
    assert _outputs(got) == _outputs(expected) and eng.overlap.steps["chained"] > chained
    _assert_clean(eng, [r.prompt_ids + g.token_ids for r, g in zip(reqs(), got)])


def test_preemption_under_a_tiny_kv_budget(engine_checkpoint):
    prompts = [make_prompt(340 + i, 14 + 5 * i) for i in range(5)]
    outs = {}
    for flag in (False, True):
        eng = _engine(engine_checkpoint, flag, kv_budget_tokens=8 * PS)
        got = eng.generate([GenerateRequest(prompt_ids=p, params=_params(i, max_tokens=24, stop=[], stop_token_ids=[]))
                            for i, p in enumerate(prompts)])  # fmt: skip
        assert eng.scheduler.num_preemptions > 0
        outs[flag] = (_outputs(got), eng.scheduler.num_preemptions)
        if flag:
            assert eng.overlap.steps["chained"] > 0
        _assert_clean(eng, [p + r.token_ids for p, r in zip(prompts, got)])
    assert outs[True] == outs[False]


def test_rows_that_need_host_state_fall_back_to_serial_steps(engines):
    """Penalties, logit bias and a grammar need the tokens on the host before sampling: steps
    holding such rows run serially, with the serial outputs."""
    prompt = make_prompt(350, 12)
    reqs = lambda: [  # noqa: E731
        GenerateRequest(prompt_ids=prompt, params=SamplingParams(temperature=0.0, max_tokens=6, ignore_eos=True,
                                                                 frequency_penalty=0.5)),
        GenerateRequest(prompt_ids=prompt, params=SamplingParams(temperature=0.0, max_tokens=6, ignore_eos=True,
                                                                 logit_bias={5: 3.0})),
        GenerateRequest(prompt_ids=prompt, params=SamplingParams(temperature=0.0, max_tokens=6,
                                                                 grammar=GrammarSpec(kind="json_object"))),
    ]
    serial = [engines[False].generate([r])[0] for r in reqs()]
    eng = engines[True]
    before = eng.overlap.steps["launched"]
    got = [eng.generate([r])[0] for r in reqs()]
    assert _outputs(got) == _outputs(serial)
    assert eng.overlap.steps["launched"] == before  # none of them overlapped


def test_a_reasoning_budget_overlaps_until_it_could_force_a_token(engines):
    """Inside <think> with a budget of 4: steps overlap while the budget cannot run out by the step
    launched, then run serially, and `</think>` is forced where the serial engine forces it."""
    prompt = make_prompt(351, 10) + [THINK_START]  # the template opened <think>
    req = lambda: GenerateRequest(prompt_ids=prompt, reasoning_budget=4, reasoning_effort="low",  # noqa: E731
                                  params=SamplingParams(temperature=0.0, max_tokens=9, ignore_eos=True))
    (serial,) = engines[False].generate([req()])
    eng = engines[True]
    before = eng.overlap.steps["chained"]
    (got,) = eng.generate([req()])
    assert _outputs([got]) == _outputs([serial])
    assert THINK_END in got.token_ids[:5] and eng.overlap.steps["chained"] > before


def test_an_overlapped_step_issues_no_host_sync_before_the_next_is_launched(engine_checkpoint):
    """The inline launcher (the CUDA form: kernels queued by the calling thread) run on the CPU:
    from the start of a step to the launch of the next, no op waits for the device."""
    eng = _engine(engine_checkpoint, True)
    eng.overlap.set_launcher(ForwardLauncher(eng.kv_cache.device, threaded=False))
    params = SamplingParams(temperature=0.8, seed=3, top_k=30, max_tokens=8, ignore_eos=True, logprobs=2)
    handles = [eng.submit(GenerateRequest(prompt_ids=make_prompt(360 + i, 7 + 9 * i), params=params)) for i in range(3)]
    eng.step()  # prefill (serial)
    eng.step()  # the first decode step is launched
    launch, seen = eng.overlap.launcher.launch, []

    def spy(fn):
        launched = launch(fn)
        seen.append(list(syncs.events))
        return launched

    eng.overlap.launcher.launch = spy
    with HostSyncCounter() as syncs:
        eng.step()  # launches the next decode step, then reads the previous one
    assert seen == [[]] and syncs.events  # nothing before the launch; the read came after it
    eng.overlap.launcher.launch = launch
    serial = _engine(engine_checkpoint, False)
    expected = serial.generate([GenerateRequest(prompt_ids=make_prompt(360 + i, 7 + 9 * i), params=params)
                                for i in range(3)])  # fmt: skip
    assert _outputs([h.result() for h in handles]) == _outputs(expected)


def test_overlap_settings_are_validated_at_the_edge(engine_checkpoint):
    with pytest.raises(ValueError, match="overlap_schedule=True and num_speculative_tokens=2 contradict"):
        EngineConfig(kv_budget_tokens=64, overlap_schedule=True, num_speculative_tokens=2)
    with pytest.raises(ValueError, match="overlap_schedule=True with 2 ranks"):
        EngineConfig(kv_budget_tokens=64, overlap_schedule=True, parallel=dict(tensor_parallel_size=2))
    assert EngineConfig(kv_budget_tokens=64, device="cuda").resolved_overlap_schedule()
    assert not EngineConfig(kv_budget_tokens=64).resolved_overlap_schedule()  # CPU: opt-in
    # MTP keeps serial steps by default (speculation is not overlapped)
    assert not EngineConfig(kv_budget_tokens=64, device="cuda", num_speculative_tokens=2).resolved_overlap_schedule()
    eng = _engine(engine_checkpoint, None, num_speculative_tokens=2)
    assert eng.overlap is None


def test_horizon_serve_overlap_flags(engine_checkpoint, capsys):
    import argparse

    from inference.cli_serve import register

    parser = argparse.ArgumentParser()
    register(parser.add_subparsers())
    parse = lambda *a: parser.parse_args(["serve", "--model", str(engine_checkpoint), *a])  # noqa: E731
    assert parse().overlap_schedule is None  # EngineConfig decides
    assert parse("--overlap-schedule").overlap_schedule is True
    assert parse("--no-overlap-schedule").overlap_schedule is False
    args = parse("--overlap-schedule", "--speculative-tokens", "2")
    assert args.func(args) == 2  # refused before anything loads, naming both settings
    err = capsys.readouterr().err
    assert "overlap_schedule=True and num_speculative_tokens=2 contradict" in err, err
