"""GLM-5.3-Flash with FP8 weights kept resident (weight_format="fp8"): the same logits, bit for bit,
as dequantize-at-load, at a fraction of the weight bytes; in the engine too."""

from __future__ import annotations

import pytest
import torch

from inference.engine import Engine, EngineConfig, GenerateRequest, SamplingParams
from inference.glm5_next.fp8_weights import Fp8ClampedExperts
from inference.glm5_next.loader import load_flash_model
from inference.glm5_next.random_checkpoint import write_flash_checkpoint
from inference.layers.fp8_linear import Fp8Linear


@pytest.fixture(scope="module")
def fp8_ckpt(tmp_path_factory):
    return write_flash_checkpoint(tmp_path_factory.mktemp("flash-fp8"), "flash-tiny", seed=3, dtype=torch.float32,
                                  fp8=True)


def _bytes(model) -> int:
    return sum(t.numel() * t.element_size() for t in model.state_dict().values())


def test_resident_fp8_weights_give_the_same_logits_in_fewer_bytes(fp8_ckpt):
    dequant, fp8 = load_flash_model(fp8_ckpt), load_flash_model(fp8_ckpt, weight_format="fp8")
    kinds = {type(m) for m in fp8.modules()}
    assert Fp8Linear in kinds and Fp8ClampedExperts in kinds
    assert fp8.model.layers[3].self_attn.kv_b_proj.weight.dtype == torch.float32  # viewed by the absorbed attention
    assert _bytes(fp8) < 0.7 * _bytes(dequant)
    ids = torch.randint(3, 500, (2, 37), generator=torch.Generator().manual_seed(0))  # well above index_topk
    assert torch.equal(fp8(ids), dequant(ids))


def test_engine_serves_resident_fp8_weights_and_refuses_w8a8(fp8_ckpt):
    prompts = [torch.randint(3, 500, (n,), generator=torch.Generator().manual_seed(n)).tolist() for n in (5, 19)]
    reqs = [GenerateRequest(prompt_ids=p, params=SamplingParams(temperature=0.0, max_tokens=4, ignore_eos=True))
            for p in prompts]
    cfg = dict(dtype="float32", kv_budget_tokens=512, page_size=8)
    eng = Engine(fp8_ckpt, EngineConfig(**cfg, weight_format="fp8"))
    assert any(isinstance(m, Fp8ClampedExperts) for m in eng.model.modules())
    model = load_flash_model(fp8_ckpt)
    assert [r.token_ids for r in eng.generate(reqs)] == [model.generate(torch.tensor([p]), 4)[0].tolist() for p in prompts]
    with pytest.raises(ValueError, match="weight_format='fp8_w8a8'"):
        Engine(fp8_ckpt, EngineConfig(**cfg, weight_format="fp8_w8a8"))
