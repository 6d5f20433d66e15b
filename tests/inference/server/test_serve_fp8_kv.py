"""`horizon serve --kv-cache-dtype fp8`: the real process starts over an FP8 KV cache and answers."""

from __future__ import annotations

from .conftest import SCRIPTED_REPLY, serve_and_complete


def test_horizon_serve_with_an_fp8_kv_cache(scripted_checkpoint):
    from inference.config import ModelConfig
    from inference.kv_cache import kv_bytes_per_token

    import torch

    banner, text = serve_and_complete(scripted_checkpoint, "--kv-cache-dtype", "fp8")
    no_mtp = ModelConfig.from_pretrained(scripted_checkpoint, num_nextn_predict_layers=0)  # loaded only to draft
    per_token = kv_bytes_per_token(no_mtp, torch.float32, "fp8")
    assert f"KV cache fp8: {per_token:,} B/token" in banner, banner
    assert text == SCRIPTED_REPLY


def test_horizon_serve_rejects_an_unknown_kv_cache_dtype(tiny_checkpoint, capsys):
    from agent.cli.main import main

    try:
        code = main(["serve", "--model", str(tiny_checkpoint), "--kv-cache-dtype", "int4"])
    except SystemExit as exc:  # argparse: invalid choice
        code = exc.code
    assert code == 2 and "--kv-cache-dtype: invalid choice: 'int4'" in capsys.readouterr().err
