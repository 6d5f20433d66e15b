"""`horizon model init-random` / `info`, and the benchmark's --quick mode."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

import torch

from inference.cli_model import register
from inference.loader import load_model

ROOT = Path(__file__).resolve().parents[3]


def _cli(argv: list[str]) -> int:
    parser = argparse.ArgumentParser()
    register(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["model", *argv])
    return args.func(args)


def test_init_random_with_overrides_and_fp8_then_info(tmp_path, capsys):
    out = tmp_path / "ckpt"
    assert _cli(["init-random", str(out), "--preset", "tiny", "--fp8", "--shards", "3",
                 "--set", "index_topk=4", "--set", "index_topk_pattern=FSSF"]) == 0  # fmt: skip
    config = json.loads((out / "config.json").read_text())
    assert config["index_topk"] == 4 and config["quantization_config"]["weight_block_size"] == [128, 128]
    assert len(set(json.loads((out / "model.safetensors.index.json").read_text())["weight_map"].values())) == 3
    model = load_model(out)
    assert model.config.indexer_types == ("full", "shared", "shared", "full")
    assert model.config.num_mtp_layers == 1
    assert model(torch.tensor([[1, 2, 3, 4, 5, 6]])).isfinite().all()
    capsys.readouterr()
    assert _cli(["info", str(out), "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["parameters"] == sum(p.numel() for p in model.parameters())
    assert info["fp8_weights"] and info["shards"] == 3
    assert info["kv_bytes_per_token_bf16"] == model.new_cache(1, 1).bytes_per_token() // 2


def test_tiny_checkpoint_has_tokenizer_and_stop_ids(tiny_checkpoint):
    config = json.loads((tiny_checkpoint / "config.json").read_text())
    tokenizer = json.loads((tiny_checkpoint / "tokenizer.json").read_text())
    special = {t["content"]: t["id"] for t in tokenizer["added_tokens"]}
    assert config["eos_token_id"] == [special["<|endoftext|>"], special["<|user|>"], special["<|observation|>"]]
    assert config["pad_token_id"] == special["<|endoftext|>"]
    assert config["vocab_size"] > max(special.values())


def test_bad_override_is_a_clear_error(tmp_path, capsys):
    assert _cli(["init-random", str(tmp_path / "x"), "--set", "n_group=3"]) == 2
    assert "n_group=3" in capsys.readouterr().err
    assert _cli(["init-random", str(tmp_path / "y"), "--set", "no_equals_sign"]) == 2


def test_benchmark_quick_mode_runs(tmp_path):
    out = tmp_path / "bench.json"
    proc = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "model_forward.py"), "--quick", "--json", str(out)],
        capture_output=True, text=True, timeout=600, cwd=ROOT,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "ratio" in proc.stdout
    (result,) = json.loads(out.read_text())
    assert result["max_abs_logit_diff"] <= 1e-4  # both sides really ran the same model
    assert result["prefill_ratio"] > 0 and result["decode_ratio_vs_generate"] > 0
