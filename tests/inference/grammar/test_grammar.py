"""Grammar specs, their compilation, batched masks in the sampler, and the engine with constraints."""

from __future__ import annotations

import json

import jsonschema
import pytest
import torch

from inference.grammar import GrammarSpec, ToolSchema
from inference.grammar.compiler import GrammarCompiler, GrammarError
from inference.grammar.schema_fixes import json_safe_schema

SCHEMA = {"type": "object", "properties": {"name": {"type": "string", "maxLength": 6}, "n": {"type": "integer",
          "minimum": 0, "maximum": 50}, "ok": {"type": "boolean"}}, "required": ["name", "n", "ok"],
          "additionalProperties": False}


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    from inference.random_checkpoint import write_random_checkpoint

    return write_random_checkpoint(tmp_path_factory.mktemp("ckpt-grammar"), preset="tiny", seed=3)


@pytest.fixture(scope="module")
def tok(checkpoint):
    from inference.tokenizer import Tokenizer

    return Tokenizer.from_pretrained(checkpoint)


@pytest.fixture(scope="module")
def engine(checkpoint):
    from inference.engine.engine import Engine
    from inference.engine.engine_config import EngineConfig

    torch.set_num_threads(1)
    return Engine(checkpoint, EngineConfig(dtype="float32", kv_budget_tokens=32768, page_size=16, max_running=32))


@pytest.mark.parametrize("fields, fragment", [
    ({"kind": "json_schema"}, "needs a schema"),
    ({"kind": "tool_call"}, "at least one tool"),
    ({"kind": "tool_call", "tools": [{"name": "a"}], "tool_choice": "b"}, "tool_choice"),
    ({"kind": "yaml"}, "kind"),
])
def test_bad_specs_are_refused(fields, fragment):
    with pytest.raises(ValueError, match=fragment):
        GrammarSpec(**fields)


def test_an_uncompilable_schema_is_a_grammar_error_naming_the_field(tok):
    compiler = GrammarCompiler.for_tokenizer(tok)
    with pytest.raises(GrammarError, match="json_schema"):
        compiler.compile(GrammarSpec(kind="json_schema", json_schema={"type": "objekt"}))
    spec = GrammarSpec(kind="json_schema", json_schema=SCHEMA)
    assert compiler.compile(spec) is compiler.compile(GrammarSpec(kind="json_schema", json_schema=dict(SCHEMA)))


def test_length_bounded_strings_become_patterns_that_need_no_escaping():
    fixed = json_safe_schema({"type": "object", "properties": {"s": {"type": "string", "minLength": 1, "maxLength": 4},
                                                               "e": {"type": "string", "enum": ["x"], "maxLength": 2}}})
    assert fixed["properties"]["s"] == {"type": "string", "pattern": '^[^"\\\\\\x00-\\x1f]{1,4}$'}
    assert fixed["properties"]["e"] == {"type": "string", "enum": ["x"], "maxLength": 2}
    raw = json_safe_schema({"type": "object", "properties": {"s": {"type": "string", "maxLength": 4}}}, True)
    assert raw["properties"]["s"] == {"type": "string", "maxLength": 4}  # GLM arguments are raw text


def _states(tok, specs):
    from inference.grammar.matcher import GrammarState

    compiler = GrammarCompiler.for_tokenizer(tok)
    return [None if s is None else GrammarState(compiler.compile(s)) for s in specs]


def test_the_sampler_masks_constrained_rows_only_in_one_batch(tok):
    from inference.engine.sampler import SampleRow, sample
    from inference.engine.sampling_params import SamplingParams
    from inference.grammar.matcher import MaskFiller

    spec = GrammarSpec(kind="json_object")
    states = _states(tok, [spec, None, spec])
    mask = MaskFiller(tok.vocab_size).fill(states)
    assert mask.shape == (3, (tok.vocab_size + 31) // 32) and (mask[1] == -1).all()
    logits = torch.randn(3, tok.vocab_size, generator=torch.Generator().manual_seed(0))
    logits[2] = logits[0]
    rows = [SampleRow(SamplingParams(temperature=0, logprobs=1), 0) for _ in range(3)]
    tokens, logprobs = sample(logits, rows, mask)
    allowed = [t for t in range(tok.vocab_size) if (int(mask[0, t // 32]) >> (t % 32)) & 1]
    assert allowed and all(tok.decode([t]).strip() in ("", "{") or tok.decode([t]).lstrip().startswith("{")
                           for t in allowed)
    assert tokens[0] in allowed and tokens[0] == tokens[2] and tokens[0] == max(allowed, key=lambda t: logits[0, t])
    assert tokens[1] == int(logits[1].argmax())  # the unconstrained row is untouched
    # logprobs stay those of the model's distribution, as for penalties and bias
    assert logprobs[0].logprob == pytest.approx(torch.log_softmax(logits[0], -1)[tokens[0]].item(), abs=1e-5)


def test_an_unconstrained_engine_never_loads_the_grammar_library(engine, tok):
    from inference.engine.request import GenerateRequest
    from inference.engine.sampling_params import SamplingParams

    engine.generate([GenerateRequest(prompt_ids=tok.encode("hello"), params=SamplingParams(max_tokens=3))])
    assert engine.grammar.loaded is None


def test_constrained_and_plain_requests_share_a_batch_and_plain_output_is_unchanged(engine, tok):
    from inference.engine.request import GenerateRequest
    from inference.engine.sampling_params import SamplingParams

    prompt = tok.encode("[gMASK]<sop><|user|>hi<|assistant|></think>")
    stops = tok.stop_token_ids

    def plain(seed):
        return GenerateRequest(prompt_ids=prompt, params=SamplingParams(seed=seed, max_tokens=24, stop_token_ids=stops))

    alone = [r.token_ids for r in engine.generate([plain(s) for s in range(2)])]
    spec = GrammarSpec(kind="json_schema", json_schema=SCHEMA)
    constrained = [GenerateRequest(prompt_ids=prompt, params=SamplingParams(seed=s, max_tokens=300, grammar=spec,
                                                                            stop_token_ids=stops)) for s in range(6)]
    mixed = engine.generate([plain(0), *constrained, plain(1)])
    assert [mixed[0].token_ids, mixed[-1].token_ids] == alone
    for r in mixed[1:-1]:
        assert r.finish_reason == "stop"
        jsonschema.validate(json.loads(tok.decode(r.token_ids[:-1])), SCHEMA)


def test_a_grammar_that_cannot_compile_is_refused_at_submit(engine, tok):
    from inference.engine.request import EngineError, GenerateRequest
    from inference.engine.sampling_params import SamplingParams

    bad = GrammarSpec(kind="json_schema", json_schema={"type": "object", "properties": {"a": {"$ref": "#/nope"}}})
    with pytest.raises(EngineError, match="params.grammar"):
        engine.submit(GenerateRequest(prompt_ids=tok.encode("x"), params=SamplingParams(grammar=bad)))


def test_mtp_speculation_keeps_the_output_in_the_grammar(checkpoint, tok):
    from inference.engine.engine import Engine
    from inference.engine.engine_config import EngineConfig
    from inference.engine.request import GenerateRequest
    from inference.engine.sampling_params import SamplingParams

    eng = Engine(checkpoint, EngineConfig(dtype="float32", kv_budget_tokens=16384, page_size=16,
                                          num_speculative_tokens=2))
    spec = GrammarSpec(kind="tool_call", tools=(ToolSchema(name="wait", parameters={
        "type": "object", "properties": {"s": {"type": "integer", "minimum": 1, "maximum": 9}}, "required": ["s"]}),),
        tool_choice="wait", parallel_tool_calls=False)
    prompt = tok.encode("[gMASK]<sop><|user|>hi<|assistant|></think>")
    out = eng.generate([GenerateRequest(prompt_ids=prompt, params=SamplingParams(
        temperature=0, max_tokens=200, grammar=spec, stop_token_ids=tok.stop_token_ids))])[0]
    from inference.chat.messages import ToolSpec
    from inference.chat.parser import parse_completion

    parsed = parse_completion(tok.decode(out.token_ids), [ToolSpec(name="wait")], start_in_reasoning=False)
    assert out.finish_reason == "stop" and [c.name for c in parsed.tool_calls] == ["wait"]
    assert 1 <= int(parsed.tool_calls[0].arguments["s"]) <= 9


def test_utf8_states_follow_the_standard():
    from inference.grammar.utf8_guard import advance

    assert advance((), "aé€😀".encode()) == ()
    assert advance((), b"\xe2\x82") == (0x80, 0xBF, 1)
    for bad in (b"\xe0\x95\x85", b"\xed\xa1\xbf", b"\xc0\x80", b"\x85", b"\xf4\x90\x80\x80", b"\xf5"):
        assert advance((), bad) is None, bad


def test_constrained_strings_stay_valid_utf8_under_noise(tok):
    """xgrammar alone lets overlong and surrogate sequences into strings; the guard keeps them out."""
    from inference.grammar.matcher import apply_mask
    from inference.grammar.runtime import GrammarRuntime
    from inference.grammar.utf8_guard import Utf8Guard

    schema = {"type": "object", "properties": {"a": {"type": "string", "maxLength": 8}}, "required": ["a"]}
    compiler = GrammarCompiler.for_tokenizer(tok)
    runtime = GrammarRuntime(compiler, tok.token_bytes)
    assert isinstance(runtime.utf8, Utf8Guard)
    compiled = compiler.compile(GrammarSpec(kind="json_schema", json_schema=schema))
    gen = torch.Generator().manual_seed(0)
    # Favour high bytes, where the invalid sequences live.
    high = torch.tensor([any(b >= 0x80 for b in t) for t in tok.token_bytes], dtype=torch.float32)
    for i in range(200):
        state, out = runtime.new_state(compiled, f"r{i}"), []
        while state.active and len(out) < 100:
            logits = torch.randn(1, tok.vocab_size, generator=gen)
            logits[0, : len(high)] += 3 * high
            apply_mask(logits, runtime.fill([state]))
            out.append(int(logits.argmax()))
            state.accept(out[-1])
        raw = b"".join(tok.token_bytes[t] for t in out if t not in tok.stop_token_ids)
        jsonschema.validate(json.loads(raw.decode("utf-8")), schema)  # strict decode: no U+FFFD
