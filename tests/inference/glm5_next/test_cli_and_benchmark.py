"""`horizon model init-random --preset flash-tiny`, `benchmarks/model_forward.py --model flash-tiny --quick` and
`benchmarks/agent_cache.py --model flash-tiny --quick`."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

import torch

from inference.cli_model import register
from inference.glm5_next.loader import load_flash_model

ROOT = Path(__file__).resolve().parents[3]


def _cli(argv: list[str]) -> int:
    parser = argparse.ArgumentParser()
    register(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["model", *argv])
    return args.func(args)


def test_init_random_flash_tiny_fp8(tmp_path, capsys):
    out = tmp_path / "flash"
    assert _cli(["init-random", str(out), "--preset", "flash-tiny", "--fp8", "--set", "index_kpool=2"]) == 0
    config = json.loads((out / "config.json").read_text())
    assert config["model_type"] == "glm5_next" and config["text_config"]["index_kpool"] == 2
    assert config["quantization_config"]["weight_block_size"] == [128, 128]
    model = load_flash_model(out)
    assert model.config.index_n_heads == 32
    assert model(torch.tensor([[3, 4, 5, 6, 7]])).isfinite().all()


def test_init_random_flash_refuses_bad_and_unknown_fields(tmp_path, capsys):
    assert _cli(["init-random", str(tmp_path / "a"), "--preset", "flash-tiny", "--set", "hc_mul=2"]) == 2
    assert "did you mean 'hc_mult'" in capsys.readouterr().err
    assert _cli(["init-random", str(tmp_path / "b"), "--preset", "flash-tiny", "--set", "qk_rope_head_dim=8"]) == 2
    assert "qk_rope_head_dim=8" in capsys.readouterr().err
    assert not (tmp_path / "a").exists() and not (tmp_path / "b").exists()


def test_flash_benchmark_quick_reports_ratios(tmp_path):
    out = tmp_path / "bench.json"
    subprocess.run([sys.executable, str(ROOT / "benchmarks" / "model_forward.py"), "--model", "flash-tiny", "--quick",
                    "--json", str(out)], check=True, timeout=300, cwd=ROOT, capture_output=True)  # fmt: skip
    (result,) = json.loads(out.read_text())
    assert result["max_abs_logit_diff"] <= 1e-4
    for key in ("prefill_ratio", "decode_ratio", "kda_chunked_vs_recurrent_prefill_ratio"):
        assert result[key] > 0


def test_image_inputs_benchmark_quick(tmp_path):
    """benchmarks/image_inputs.py --quick: our pixel rows equal transformers' (it asserts so) and it
    reports the per-image costs and bytes, ours vs transformers'."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("bench_image_inputs", ROOT / "benchmarks" / "image_inputs.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)  # in-process: this session has torch and transformers loaded already
    out = tmp_path / "images.json"
    threads = torch.get_num_threads()
    try:
        assert bench.main(["--quick", "--json", str(out)]) == 0
    finally:
        torch.set_num_threads(threads)
    (result,) = json.loads(out.read_text())
    assert result["image"] == "640x400" and result["image_tokens"] == (644 // 28) * (420 // 28)
    assert result["held_bytes_ours"] * 8 == result["held_bytes_hf"]  # uint8 canvas vs fp32 rows x temporal 2
    for key in ("first_sight_ratio", "resent_ratio", "hf_ms", "ours_prepare_ms", "ours_patchify_ms"):
        assert result[key] > 0


def test_agent_cache_benchmark_quick_snapshots_on_vs_off(capsys):
    """The real model over agent sessions: with KDA state snapshots, hits and fewer recomputed
    tokens; without, none; the same greedy tokens either way."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("bench_agent_cache", ROOT / "benchmarks" / "agent_cache.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    assert bench.main(["--model", "flash-tiny", "--quick"]) == 0
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines() if line.startswith("{")]
    rows = {line["policy"]: line for line in lines if "policy" in line}
    on, off = rows["snapshots-on"], rows["snapshots-off"]
    for row in (on, off):
        assert row["hit_tokens"] == row["device_hit_tokens"] + row["host_hit_tokens"]
        assert row["recomputed_tokens"] == row["prompt_tokens"] - row["hit_tokens"]
    assert on["prompt_tokens"] == off["prompt_tokens"] and off["hit_tokens"] == 0
    assert on["hit_rate"] > 0 and on["recomputed_tokens"] < off["recomputed_tokens"]
    assert on["state_snapshots"]["resumed"] > 0
    assert lines[-1]["flash_comparison"]["outputs_identical"] is True


def test_info_reports_cache_per_token_and_state_per_sequence(tmp_path, capsys):
    out = tmp_path / "flash"
    assert _cli(["init-random", str(out), "--preset", "flash-tiny"]) == 0
    capsys.readouterr()
    assert _cli(["info", str(out), "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    model = load_flash_model(out)
    assert info["parameters"] == sum(p.numel() for p in model.parameters())
    cache = model.new_paged_cache(num_pages=1, page_size=1, slots=1)
    assert info["kv_bytes_per_token_bf16"] * 2 == cache.kv_bytes_per_token  # loaded in fp32: 4-byte rows
    assert info["kda_state_bytes_per_sequence"] == cache.state_bytes_per_sequence
    assert info["vision_parameters"] > 0
    assert _cli(["info", str(out)]) == 0
    assert "KDA state/sequence" in capsys.readouterr().out
