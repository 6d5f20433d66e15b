"""`horizon model plan` on the shipped GLM-5.3 FP8 config (no weights): the numbers of
../shared/docs/scaleout.md §3 (≈90 GiB weights per rank under TP8, ≈600K KV tokens, 6 sessions of
100K), and the same from a checkpoint folder holding only config.json."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from inference.config import ModelConfig
from inference.memory_plan import GIB, parse_bytes, plan

CONFIG = Path(__file__).resolve().parents[3] / "inference" / "configs" / "glm-5.3-fp8.json"


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "agent.cli.main", "model", "plan", *args],
                          capture_output=True, text=True, timeout=120)


@pytest.fixture(scope="module")
def glm53_json(tmp_path_factory):
    folder = tmp_path_factory.mktemp("glm53")
    shutil.copy(CONFIG, folder / "config.json")  # a checkpoint folder with no weights
    out = _cli(str(folder), "--gpus", "8", "--gpu-memory", "141GiB", "--kv-cache-dtype", "fp8", "--tp", "8", "--json")
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def test_glm53_on_8xh200_matches_the_design(glm53_json):
    p = glm53_json
    assert 89.0 < p["weights_bytes_per_rank"] / GIB < 91.0
    assert p["kv_bytes_per_token"] == 54_728  # 53,940 B FP8 + 788 B for the MTP layer
    assert 590_000 < p["kv_tokens"] < 620_000
    assert p["sessions_100k"] == 6
    assert abs(p["parameters"] - 753_329_921_024) / 753_329_921_024 < 1e-6


def test_text_output_and_bf16_cache_halve_the_sessions():
    config = ModelConfig.from_pretrained(CONFIG)
    bf16 = plan(config, 8, parse_bytes("141GiB"), kv_cache_dtype="auto")
    assert bf16.sessions_100k == 3 and "100K sessions" in bf16.describe()
    out = _cli("glm-5.3", "--gpus", "8")
    assert out.returncode == 0 and "weights per rank  89.7 GiB" in out.stdout


def test_a_layout_that_does_not_split_is_refused():
    out = _cli("glm-5.3", "--gpus", "6")
    assert out.returncode == 2 and "num_attention_heads = 64 is not divisible by the parallel size 6" in out.stderr
    with pytest.raises(ValueError, match="expected a size like"):
        parse_bytes("lots")


def test_fp8_layouts_that_cut_scale_blocks_are_refused():
    from inference.parallel import ParallelState
    from inference.parallel.shard import fp8_block_misalignments

    config = ModelConfig.from_pretrained(CONFIG)
    assert all(not fp8_block_misalignments(config, ParallelState(8, r, 8), (128, 128)) for r in range(8))
    with pytest.raises(ValueError, match="shared_experts.gate_proj.weight: rank 0's rows \\[0, 64\\) cut"):
        plan(config, 32, parse_bytes("141GiB"))


def test_dp_attention_layouts_next_to_tp():
    """scaleout.md §3.3: DP8+EP8 with vocab/TP-split extras holds 99.3 GiB of weights per rank,
    374K KV tokens per rank (2.99M per node) and 24 sessions of 100K; with everything but the
    experts replicated 105.3 GiB, 256K (2.05M) and 16; TP8 holds 6."""
    out = _cli("glm-5.3", "--gpus", "8", "--gpu-memory", "143771MiB", "--dp-attention", "--json")
    p = json.loads(out.stdout)
    split, replicated = p["dp_layouts"]
    assert split["extras"] == "split" and replicated["extras"] == "replicated"
    assert 99.0 < split["weights_bytes_per_rank"] / GIB < 99.6
    assert 370_000 < split["kv_tokens_per_rank"] < 378_000 and split["sessions_100k"] == 24
    assert 105.0 < replicated["weights_bytes_per_rank"] / GIB < 105.6
    assert 250_000 < replicated["kv_tokens_per_rank"] < 260_000 and replicated["sessions_100k"] == 16
    for d in (split, replicated):
        assert d["kv_tokens_per_node"] == 8 * d["kv_tokens_per_rank"]
    assert p["sessions_100k"] == 6
    text = plan(ModelConfig.from_pretrained(CONFIG), 8, parse_bytes("143771MiB"), dp_attention=True).describe()
    assert "extras split (default" in text and "(4.97x TP8's 601,056)" in text and "(3.41x TP8's 601,056)" in text


def test_a_dp_layout_that_would_cut_fp8_blocks_is_refused_by_name():
    """DP32 with split extras: the shared expert's 2048 rows / 32 = 64 cut the 128-row blocks."""
    message = (r"DP32 with split extras cannot keep the weights in FP8: "
               r"model.layers.\*.mlp.shared_experts.gate_proj.weight: rank 0's rows \[0, 64\)")
    with pytest.raises(ValueError, match=message):
        plan(ModelConfig.from_pretrained(CONFIG), 32, parse_bytes("141GiB"), tp=8, dp_attention=True)


@pytest.mark.parametrize("world,ep,attention_dp,split_extras", [
    (8, 8, False, True), (4, 2, False, True), (8, 8, True, True), (8, 8, True, False),
])
def test_rank_shapes_are_the_sharded_models_own(world, ep, attention_dp, split_extras):
    """The plan cuts the whole model's shapes by shard.py's rules: they must be exactly the shapes
    a sharded model allocates (TP8/EP8, TP4 with experts both EP- and TP-split, DP-attention with
    split and with replicated extras)."""
    import torch

    from inference.memory_plan import model_shapes, rank_shape
    from inference.model import Glm5ForCausalLM
    from inference.parallel import ParallelState

    config = ModelConfig.from_pretrained(CONFIG)
    whole = model_shapes(config)
    state = ParallelState(world, world - 1, ep, attention_dp=attention_dp,  # the last rank: vocab padding
                          split_extras=split_extras)
    with torch.device("meta"):
        sharded = {k: tuple(v.shape) for k, v in Glm5ForCausalLM(config, state).state_dict().items()}
    assert sharded.keys() == whole.keys()
    assert {k: rank_shape(k, s, config, state) for k, s in whole.items()} == sharded


def test_one_meta_build_serves_the_whole_plan(monkeypatch):
    """Whole model, TP rank and DP-attention rank all come from one meta build (there were four)."""
    import inference.model

    builds = []
    real = inference.model.Glm5ForCausalLM

    def counting(*args, **kwargs):
        builds.append(args[1:] or kwargs)
        return real(*args, **kwargs)

    monkeypatch.setattr(inference.model, "Glm5ForCausalLM", counting)
    p = plan(ModelConfig.from_pretrained(CONFIG), 8, parse_bytes("141GiB"), dp_attention=True)
    assert len(builds) == 1 and p.dp_layout("replicated").kv_tokens_per_node > 3 * p.kv_tokens
    assert p.dp_layout("split").kv_tokens_per_node > 4.5 * p.kv_tokens
