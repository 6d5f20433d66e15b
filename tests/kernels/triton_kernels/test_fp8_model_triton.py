"""The FP8-resident model on its GPU path: every FP8 GEMM, the FP8 fused MoE and the DSA kernels run as
Triton (interpreted on CPU), against the same model on the kernels' torch references.

Both quantize activations identically (act_quant is bitwise equal across backends); the GEMMs sum
in different orders, which can move an activation across an e4m3 rounding boundary downstream, so
the logits agree to a tolerance, not bitwise. The prompt is no longer than index_topk and the
routing margins of this seed are wide, so no discrete choice flips."""

from __future__ import annotations

import pytest
import torch

from inference.loader import load_model
from inference.random_checkpoint import write_random_checkpoint


@pytest.fixture(scope="module")
def fp8_checkpoint(tmp_path_factory):
    # 16x16 blocks: the smallest K tile tl.dot takes
    return write_random_checkpoint(tmp_path_factory.mktemp("fp8_triton"), "tiny", seed=3, fp8=True, fp8_block=(16, 16))


def _logits(path, backend, device, monkeypatch, weight_format="fp8_w8a8"):
    monkeypatch.setenv("HORIZON_KERNEL_BACKEND", backend)  # the FP8 linears' "auto" backend
    model = load_model(path, dtype=torch.float32, device=device, weight_format=weight_format)
    model.kernel_backend = backend
    ids = torch.randint(0, 500, (1, 8), generator=torch.Generator().manual_seed(2)).to(device)
    with torch.no_grad():
        return model(ids).float().cpu()


def test_w8a8_model_on_triton_matches_the_references(fp8_checkpoint, device, monkeypatch):
    got = _logits(fp8_checkpoint, "triton", device, monkeypatch)
    want = _logits(fp8_checkpoint, "torch", device, monkeypatch)
    rel = ((got - want).norm() / want.norm()).item()
    assert rel < 1e-2, rel


def test_w8a16_model_on_triton_matches_the_references(fp8_checkpoint, device, monkeypatch):
    got = _logits(fp8_checkpoint, "triton", device, monkeypatch, "fp8")
    want = _logits(fp8_checkpoint, "torch", device, monkeypatch, "fp8")
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)
