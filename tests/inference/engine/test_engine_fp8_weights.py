"""The engine over FP8-resident weights: EngineConfig.weight_format reaches the loader, and the
"fp8" (per-call dequant) engine generates exactly the dequantize-at-load engine's tokens, with
concurrency, prefix hits and MTP drafts (the logits are bit-identical, test_fp8_resident.py)."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from inference.engine import Engine, EngineConfig, GenerateRequest, SamplingParams
from inference.layers.fp8_linear import Fp8Linear
from inference.random_checkpoint import write_random_checkpoint

from .conftest import make_prompt

PROMPTS = [make_prompt(i, n) for i, n in enumerate([30, 9, 41, 17])]


@pytest.fixture(scope="module")
def fp8_ckpt(tmp_path_factory):
    return write_random_checkpoint(tmp_path_factory.mktemp("engine_fp8_w"), "tiny", seed=5, fp8=True, fp8_block=(8, 8))


def _run(ckpt, weight_format, **extra):
    cfg = dict(dtype="float32", kv_budget_tokens=1024, page_size=16, weight_format=weight_format, **extra)
    eng = Engine(ckpt, EngineConfig(**cfg))
    params = SamplingParams(temperature=0.0, max_tokens=6, ignore_eos=True)
    prompts = PROMPTS + [PROMPTS[0][:20] + make_prompt(9, 5)]  # the last one hits PROMPTS[0]'s pages
    return eng, [r.token_ids for r in eng.generate([GenerateRequest(prompt_ids=p, params=params) for p in prompts])]


@pytest.mark.parametrize("mtp", [0, 2])
def test_fp8_weights_generate_the_dequant_engines_tokens(fp8_ckpt, mtp):
    ref_engine, ref = _run(fp8_ckpt, "dequant", num_speculative_tokens=mtp)
    fp8_engine, got = _run(fp8_ckpt, "fp8", num_speculative_tokens=mtp)
    assert isinstance(fp8_engine.model.model.layers[0].self_attn.q_b_proj, Fp8Linear)
    assert not isinstance(ref_engine.model.model.layers[0].self_attn.q_b_proj, Fp8Linear)
    assert got == ref


def test_weight_format_is_validated_and_auto_resolves_per_device():
    assert EngineConfig(kv_budget_tokens=1).resolved_weight_format() == "dequant"
    assert EngineConfig(kv_budget_tokens=1, device="cuda").resolved_weight_format() == "fp8_w8a8"
    with pytest.raises(ValidationError, match="weight_format must be 'auto', 'dequant', 'fp8' or 'fp8_w8a8', got 'int4'"):
        EngineConfig(kv_budget_tokens=1, weight_format="int4")
