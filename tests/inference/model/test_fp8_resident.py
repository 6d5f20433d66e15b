"""FP8-resident weights (weight_format "fp8" / "fp8_w8a8") against dequantize-at-load ("dequant").

- "fp8" dequantizes per call with the loader's own function into the same layout: logits must be
  bit-identical, for prefill and decode (forward_batch over the paged cache), fp32 and bf16.
- "fp8_w8a8" adds per-token activation rounding (e4m3, 3 mantissa bits). Discrete choices
  amplify it: on the tiny preset an expert or key choice that flips moves the logits by 20-35% of
  their norm (bf16 vs fp32 dequant-at-load flips as well). So the bound is measured where nothing
  discrete can flip: every token routes to all (2) experts and the prompt is no longer than
  index_topk. There the logits differ by 5.3-8.3% (fp32) and 5.8-8.7% (bf16) of their norm over
  10 prompts; the test bounds it at 15%.
- Resident bytes of the quantized tensors: ~1/2 of bf16 and ~1/4 of fp32 dequant-at-load, plus the
  fp32 scales (1/16 of a byte per weight with the 8x8 blocks used here).
"""

from __future__ import annotations

import json

import pytest
import torch
from safetensors import safe_open
from safetensors.torch import save_file

from inference.forward_batch import ForwardBatch
from inference.layers.fp8_experts import Fp8RoutedExperts
from inference.layers.fp8_linear import Fp8Linear
from inference.loader import CheckpointError, checkpoint_files, load_model
from inference.random_checkpoint import write_random_checkpoint

BLOCK = (8, 8)


@pytest.fixture(scope="module")
def fp8_checkpoint(tmp_path_factory):
    return write_random_checkpoint(tmp_path_factory.mktemp("fp8_tiny"), "tiny", seed=3, fp8=True, fp8_block=BLOCK)


def _ids(n, seed=0):
    return torch.randint(0, 500, (1, n), generator=torch.Generator().manual_seed(seed))


def test_checkpoint_records_the_block_and_the_loader_keeps_e4m3(fp8_checkpoint):
    qc = json.loads((fp8_checkpoint / "config.json").read_text())["quantization_config"]
    assert qc["weight_block_size"] == list(BLOCK)
    model = load_model(fp8_checkpoint, dtype=torch.bfloat16, weight_format="fp8")
    attn = model.model.layers[1].self_attn
    assert isinstance(attn.q_b_proj, Fp8Linear) and attn.q_b_proj.weight.dtype == torch.float8_e4m3fn
    assert attn.q_b_proj.weight_scale_inv.shape == (96 // 8, 32 // 8)
    # kept in the model dtype (scaleout.md §2.5): absorbed attention's kv_b, the indexer's wk
    assert attn.kv_b_proj.weight.dtype == torch.bfloat16 and attn.indexer.wk.weight.dtype == torch.bfloat16
    experts = model.model.layers[1].mlp.experts
    assert isinstance(experts, Fp8RoutedExperts) and experts.gate_up_proj.dtype == torch.float8_e4m3fn
    assert experts.gate_up_proj_scale_inv.shape == (8, 64 // 8, 64 // 8)
    # state_dict names stay the checkpoint's (plus the packed experts' scales)
    names = set(model.state_dict())
    assert "model.layers.1.self_attn.q_b_proj.weight_scale_inv" in names
    assert "model.layers.1.mlp.experts.gate_up_proj_scale_inv" in names


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_fp8_per_call_dequant_logits_equal_dequant_at_load_bitwise(fp8_checkpoint, dtype):
    ref = load_model(fp8_checkpoint, dtype=dtype)
    fp8 = load_model(fp8_checkpoint, dtype=dtype, weight_format="fp8")
    with torch.no_grad():
        for n in (1, 5, 40):  # batch-1 expert path, short prompt, sparse top-k selection
            ids = _ids(n, seed=n)
            assert torch.equal(fp8(ids), ref(ids)), n
        outs = []
        for model in (ref, fp8):  # prefill then one decode step over the paged cache
            cache = model.new_cache(8, 16)
            pre = model.forward_batch(ForwardBatch.build([_ids(12, 1)[0].tolist()], [0], [[0]], logits="all"), cache)
            dec = model.forward_batch(ForwardBatch.build([[7, 9]], [12], [[0]], logits="all"), cache)
            outs.append((pre.logits, dec.logits))
    assert torch.equal(outs[0][0], outs[1][0]) and torch.equal(outs[0][1], outs[1][1])


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_w8a8_logits_within_the_measured_bound(tmp_path_factory, dtype):
    all_experts = dict(n_routed_experts=2, num_experts_per_tok=2, n_group=1, topk_group=1)
    path = write_random_checkpoint(tmp_path_factory.mktemp("fp8_dense_routing"), "tiny", seed=3, overrides=all_experts,
                                   fp8=True, fp8_block=BLOCK)  # fmt: skip
    ids = _ids(8, seed=2)  # <= index_topk: no top-k selection to flip
    with torch.no_grad():
        ref = load_model(path, dtype=dtype)(ids).float()
        got = load_model(path, dtype=dtype, weight_format="fp8_w8a8")(ids).float()
    rel = ((got - ref).norm() / ref.norm()).item()
    assert 0 < rel < 0.15, rel


def _quantized_bytes(model) -> tuple[int, int]:
    """(bytes of e4m3 weights + their scales, number of such weights)."""
    total = count = 0
    for name, p in model.state_dict().items():
        if p.dtype == torch.float8_e4m3fn:
            scale = model.state_dict()[name + "_scale_inv"]
            total += p.numel() + scale.numel() * 4
            count += p.numel()
    return total, count


@pytest.mark.parametrize("dtype,ratio", [(torch.bfloat16, 0.5), (torch.float32, 0.25)])
def test_resident_bytes_of_quantized_tensors(fp8_checkpoint, dtype, ratio):
    fp8 = load_model(fp8_checkpoint, dtype=dtype, weight_format="fp8")
    ref = load_model(fp8_checkpoint, dtype=dtype)
    fp8_bytes, n_fp8 = _quantized_bytes(fp8)
    ref_state = ref.state_dict()
    ref_bytes = sum(ref_state[k].numel() * ref_state[k].element_size() for k, v in fp8.state_dict().items() if v.dtype == torch.float8_e4m3fn)
    measured = fp8_bytes / ref_bytes
    scale_overhead = 4 / (BLOCK[0] * BLOCK[1]) / ref_state["lm_head.weight"].element_size()
    assert measured == pytest.approx(ratio + scale_overhead, rel=0.02), measured
    # and the model as a whole is smaller by exactly the quantized tensors' difference
    total = lambda m: sum(t.numel() * t.element_size() for t in {id(t): t for t in m.state_dict().values()}.values())  # noqa: E731
    assert total(ref) - total(fp8) == ref_bytes - fp8_bytes


def _rewrite(src, dst, edit):
    dst.mkdir()
    tensors = {}
    for name, file in checkpoint_files(src).items():
        with safe_open(file, framework="pt") as f:
            tensors[name] = f.get_tensor(name)
    edit(tensors)
    (dst / "config.json").write_text((src / "config.json").read_text())
    save_file({k: v.contiguous() for k, v in tensors.items()}, str(dst / "model.safetensors"))
    return dst


@pytest.mark.parametrize("weight_format", ["dequant", "fp8", "fp8_w8a8"])
def test_missing_or_misshaped_scales_are_refused_naming_the_tensor(fp8_checkpoint, tmp_path, weight_format):
    q_b = "model.layers.1.self_attn.q_b_proj.weight"
    expert = "model.layers.1.mlp.experts.3.up_proj.weight"
    missing = _rewrite(fp8_checkpoint, tmp_path / "missing", lambda t: (t.pop(q_b + "_scale_inv"), t.pop(expert + "_scale_inv")))
    with pytest.raises(CheckpointError) as err:
        load_model(missing, weight_format=weight_format)
    assert f"{q_b}: stored as F8_E4M3 but {q_b}_scale_inv is missing" in str(err.value)
    assert f"{expert}: stored as F8_E4M3 but {expert}_scale_inv is missing" in str(err.value)

    def bad_shape(t):
        t[q_b + "_scale_inv"] = torch.ones(3, 4)

    wrong = _rewrite(fp8_checkpoint, tmp_path / "wrong", bad_shape)
    with pytest.raises(CheckpointError, match=rf"{q_b}_scale_inv: shape \[3, 4\], expected \[12, 4\] for weight \[96, 32\] with 8x8 blocks"):
        load_model(wrong, weight_format=weight_format)


def test_a_checkpoint_without_fp8_weights_loads_plain_under_every_format(tiny_checkpoint):
    ids = _ids(6)
    with torch.no_grad():
        ref = load_model(tiny_checkpoint)(ids)
        for weight_format in ("fp8", "fp8_w8a8"):
            model = load_model(tiny_checkpoint, weight_format=weight_format)
            assert not any(isinstance(m, (Fp8Linear, Fp8RoutedExperts)) for m in model.modules())
            assert torch.equal(model(ids), ref)


def test_unknown_weight_format_is_refused(fp8_checkpoint):
    with pytest.raises(ValueError, match=r"weight_format='int4': expected one of \('dequant', 'fp8', 'fp8_w8a8'\)"):
        load_model(fp8_checkpoint, weight_format="int4")


def test_rope_permutation_of_fp8_rows_must_stay_inside_a_scale_block():
    from inference.layers.rope import deinterleave_rope_rows

    lin = Fp8Linear(16, 48, (16, 16))
    lin.weight.data = torch.randn(48, 16).to(torch.float8_e4m3fn)
    lin.tag_weight()
    before = lin.weight.detach().view(torch.uint8).clone()
    deinterleave_rope_rows(lin.weight, 24, 16, 8)  # rows 16..23 and 40..47: inside 16-row blocks
    perm = torch.tensor([0, 2, 4, 6, 1, 3, 5, 7])
    assert torch.equal(lin.weight.view(torch.uint8)[16:24], before[16:24][perm])
    with pytest.raises(ValueError, match=r"rope rows 12..19 of every 24-row group cross a 16-row FP8 scale block"):
        deinterleave_rope_rows(lin.weight, 24, 12, 8)
