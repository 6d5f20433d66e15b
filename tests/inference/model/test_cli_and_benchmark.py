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


def test_init_random_fp8_block_is_written_and_loaded(tmp_path, capsys):
    out = tmp_path / "ckpt"
    assert _cli(["init-random", str(out), "--fp8", "--fp8-block", "8,16", "--shards", "1"]) == 0
    assert json.loads((out / "config.json").read_text())["quantization_config"]["weight_block_size"] == [8, 16]
    model = load_model(out, weight_format="fp8")
    assert model.model.layers[0].self_attn.q_b_proj.block == (8, 16)
    assert _cli(["init-random", str(tmp_path / "bad"), "--fp8", "--fp8-block", "8"]) == 2
    assert "fp8_block=(8,): expected two positive ints" in capsys.readouterr().err


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


def test_unknown_override_key_is_rejected_with_a_suggestion(tmp_path, capsys):
    out = tmp_path / "x"
    assert _cli(["init-random", str(out), "--set", "nonexist=3"]) == 2
    assert "nonexist" in capsys.readouterr().err
    assert _cli(["init-random", str(out), "--set", "index_topkk=4"]) == 2
    err = capsys.readouterr().err
    assert "index_topkk" in err and "'index_topk'" in err
    assert not out.exists() or not any(out.iterdir())


def test_zero_shards_is_rejected(tmp_path, capsys):
    assert _cli(["init-random", str(tmp_path / "x"), "--shards", "0"]) == 2
    assert "shards=0" in capsys.readouterr().err


def test_non_empty_out_needs_force_which_replaces_only_checkpoint_files(tmp_path, capsys):
    out = tmp_path / "ckpt"
    assert _cli(["init-random", str(out), "--shards", "3"]) == 0
    (out / "notes.txt").write_text("mine")
    assert _cli(["init-random", str(out), "--shards", "1"]) == 2
    assert "--force" in capsys.readouterr().err
    assert len(list(out.glob("*.safetensors"))) == 3  # refused before touching anything
    assert _cli(["init-random", str(out), "--shards", "1", "--force", "--set", "nonexist=1"]) == 2
    assert len(list(out.glob("*.safetensors"))) == 3  # a bad request clears nothing either
    assert _cli(["init-random", str(out), "--shards", "1", "--force"]) == 0
    assert [p.name for p in out.glob("*.safetensors")] == ["model-00001-of-00001.safetensors"]
    assert (out / "notes.txt").read_text() == "mine"
    assert load_model(out)(torch.tensor([[1, 2, 3]])).isfinite().all()


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
    assert result["compiled_decode_ratio_vs_generate"] > 0 and result["ours"]["compile_s"] > 0
    floor = result["matmul_floor"]
    assert floor["ours_ms_per_token"] > 0 and floor["transformers_ms_per_token"] > 0
    assert floor["our_weight_mb_per_token"] > 0
