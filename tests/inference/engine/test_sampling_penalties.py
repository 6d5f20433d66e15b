"""Presence / frequency / repetition penalties and logit bias: exact arithmetic on the sampler,
and greedy generation against transformers' own processors on the same checkpoint."""

from __future__ import annotations

import pytest
import torch
from pydantic import ValidationError

from inference.engine import Engine, EngineConfig, GenerateRequest, SamplingParams
from inference.engine.sampler import SampleRow, _penalized, sample

from .conftest import make_prompt


def test_presence_frequency_and_repetition_arithmetic():
    logits = torch.tensor([[2.0, -1.0, 0.5, 3.0, -2.0]])
    params = SamplingParams(temperature=0.0, presence_penalty=0.5, frequency_penalty=0.25, repetition_penalty=2.0)
    # Prompt [3, 4]; output so far [0, 0, 1]: counts come from the output only, repetition from both.
    row = SampleRow(params, 3, tokens=[3, 4, 0, 0, 1], prompt_len=2)
    got = _penalized(logits.clone(), [row])[0]
    expected = torch.tensor([
        2.0 / 2 - 0.25 * 2 - 0.5,   # in output twice, positive logit divided
        -1.0 * 2 - 0.25 - 0.5,      # in output once, negative logit multiplied
        0.5,                        # never seen: untouched
        3.0 / 2,                    # prompt only: repetition penalty, no presence/frequency
        -2.0 * 2,
    ])  # fmt: skip
    assert torch.allclose(got, expected)


def test_logit_bias_forces_and_bans_under_greedy():
    logits = torch.tensor([[5.0, 1.0, 0.0, -1.0]])
    forced, _ = sample(logits, [SampleRow(SamplingParams(temperature=0.0, logit_bias={3: 100.0}), 0)])
    banned, _ = sample(logits, [SampleRow(SamplingParams(temperature=0.0, logit_bias={0: -100.0}), 0)])
    assert forced == [3] and banned == [1]


def test_a_penalized_row_does_not_change_its_neighbours():
    g = torch.Generator().manual_seed(0)
    logits = torch.randn(4, 50, generator=g)
    plain = [SampleRow(SamplingParams(temperature=0.8, seed=s), 2) for s in range(3)]
    pen = SampleRow(SamplingParams(temperature=0.0, frequency_penalty=2.0), 2, tokens=[7, int(logits[3].argmax())], prompt_len=1)
    together, _ = sample(logits, plain + [pen])
    alone, _ = sample(logits[:3], plain)
    assert together[:3] == alone
    assert together[3] != int(logits[3].argmax())  # the top token was just generated: penalised away


@pytest.mark.parametrize("field,value", [("presence_penalty", 2.5), ("frequency_penalty", -3.0),
                                         ("repetition_penalty", 0.0), ("logit_bias", {5: 101.0})])
def test_out_of_range_values_are_refused_with_the_field(field, value):
    with pytest.raises(ValidationError, match=field):
        SamplingParams(**{field: value})


def _engine(ckpt) -> Engine:
    return Engine(ckpt, EngineConfig(dtype="float32", device="cpu", kv_budget_tokens=1024, page_size=16,
                                     latent_norm_eps=1e-6))


def _hf(ckpt):
    from transformers import GlmMoeDsaForCausalLM

    return GlmMoeDsaForCausalLM.from_pretrained(ckpt, dtype=torch.float32, attn_implementation="eager").eval()


class _OpenAIPenalties:
    """An independent statement of OpenAI's presence/frequency rule as a transformers logits processor."""

    def __init__(self, prompt_len: int, presence: float, frequency: float):
        self.prompt_len, self.presence, self.frequency = prompt_len, presence, frequency

    def __call__(self, input_ids, scores):
        for b in range(scores.shape[0]):
            for token in set(input_ids[b, self.prompt_len:].tolist()):
                count = int((input_ids[b, self.prompt_len:] == token).sum())
                scores[b, token] -= self.frequency * count + self.presence
        return scores


def _hf_greedy(hf, prompt: list[int], n: int, **kw) -> list[int]:
    with torch.inference_mode():
        out = hf.generate(torch.tensor([prompt]), max_new_tokens=n, do_sample=False, eos_token_id=None,
                          pad_token_id=0, **kw)
    return out[0, len(prompt):].tolist()


def test_penalties_and_logit_bias_match_transformers_generate(engine_checkpoint):
    """Greedy with each adjustment equals transformers with the same rule: its own
    RepetitionPenaltyLogitsProcessor (prompt + output, CTRL) and one-token sequence_bias, and the
    OpenAI presence/frequency rule written out above. Each also differs from the plain output, so
    the comparison can fail. A long prompt covers a third of the vocabulary, so the repetition
    penalty bites; negative presence/frequency make this non-repeating model repeat itself."""
    from transformers import LogitsProcessorList

    eng, hf = _engine(engine_checkpoint), _hf(engine_checkpoint)
    prompt, n = make_prompt(11, 160), 16
    plain = _hf_greedy(hf, prompt, n)
    banned = plain[0]
    expected = {
        "repetition": _hf_greedy(hf, prompt, n, repetition_penalty=3.0),
        "bias": _hf_greedy(hf, prompt, n, sequence_bias={(banned,): -100.0}),
        "openai": _hf_greedy(hf, prompt, n, logits_processor=LogitsProcessorList([_OpenAIPenalties(len(prompt), -1.0, -2.0)])),
    }
    knobs = {"repetition": dict(repetition_penalty=3.0), "bias": dict(logit_bias={banned: -100.0}),
             "openai": dict(presence_penalty=-1.0, frequency_penalty=-2.0)}
    results = eng.generate([GenerateRequest(prompt_ids=prompt, params=SamplingParams(
        temperature=0.0, max_tokens=n, ignore_eos=True, **knobs[k])) for k in expected])
    for (name, want), got in zip(expected.items(), results):
        assert got.token_ids == want, name
        assert want != plain, name
    assert banned not in expected["bias"]


def test_penalised_greedy_is_the_same_with_mtp_speculation(engine_checkpoint):
    """Verification samples position by position with the tokens accepted before it in the counts,
    so speculation cannot change a penalised output either."""
    prompt = make_prompt(13, 40)
    params = SamplingParams(temperature=0.0, max_tokens=20, ignore_eos=True, presence_penalty=-1.0,
                            frequency_penalty=-2.0, repetition_penalty=1.5)
    plain = _engine(engine_checkpoint).generate([GenerateRequest(prompt_ids=prompt, params=params)])[0]
    spec = Engine(engine_checkpoint, EngineConfig(dtype="float32", device="cpu", kv_budget_tokens=1024, page_size=16,
                                                  latent_norm_eps=1e-6, num_speculative_tokens=3))
    (drafted,) = spec.generate([GenerateRequest(prompt_ids=prompt, params=params)])
    assert drafted.token_ids == plain.token_ids
    assert drafted.usage.spec_draft_tokens > 0
