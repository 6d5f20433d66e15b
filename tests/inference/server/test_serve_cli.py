"""`horizon serve` as a real process: starts, answers, shuts down on SIGTERM."""

from __future__ import annotations

import re
import socket

from .conftest import SCRIPTED_REPLY, serve_and_complete


def test_horizon_serve_process(scripted_checkpoint):
    banner, text = serve_and_complete(scripted_checkpoint, "--served-model-name", "cli-model", model_name="cli-model")
    assert re.search(r"on http://127\.0\.0\.1:\d+/v1 ", banner) and "glm-5.2 template" in banner, banner
    assert text == SCRIPTED_REPLY


def test_horizon_serve_rejects_a_folder_without_checkpoint(tmp_path):
    from agent.cli.main import main

    assert main(["serve", "--model", str(tmp_path)]) == 2


def test_horizon_serve_on_a_busy_port_fails_in_one_line_before_loading(tmp_path, capsys):
    """The folder is no loadable checkpoint past config.json: reaching the model load would fail differently."""
    from agent.cli.main import main

    (tmp_path / "config.json").write_text('{"model_type": "glm_moe_dsa"}')
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen(1)
        port = busy.getsockname()[1]
        code = main(["serve", "--model", str(tmp_path), "--port", str(port), "--kv-budget-tokens", "64"])
    err = capsys.readouterr().err
    assert code == 2 and "Traceback" not in err
    assert err.strip() == f"horizon serve: cannot listen on 127.0.0.1:{port}: Address already in use " \
                          "(choose another --port or --host)"


def test_default_engine_config_covers_the_context_and_keeps_overrides(tiny_checkpoint):
    from inference.engine_defaults import EngineSettingsError, default_engine_config

    config = default_engine_config(tiny_checkpoint, page_size=48, num_speculative_tokens=2)
    assert config.kv_budget_tokens == 4128 and config.page_size == 48  # 4096 + 2 drafts, in whole pages
    assert default_engine_config(tiny_checkpoint, kv_budget_tokens=512).kv_budget_tokens == 512
    assert default_engine_config(tiny_checkpoint, kv_budget_bytes=10**6).kv_budget_tokens is None
    try:
        default_engine_config(tiny_checkpoint, max_running=0)
    except EngineSettingsError as exc:
        assert str(exc) == "max_running: got 0 (input should be greater than or equal to 1)"
    else:
        raise AssertionError("max_running=0 was accepted")


def test_default_budget_counts_the_kv_formats_real_bytes(tiny_checkpoint, monkeypatch):
    """Under the byte cap an FP8 cache holds more tokens than a model-dtype one, in proportion."""
    import torch

    from inference import engine_defaults
    from inference.config import ModelConfig
    from inference.kv_cache import kv_bytes_per_token

    cfg = ModelConfig.from_pretrained(tiny_checkpoint)
    monkeypatch.setattr(engine_defaults, "DEFAULT_KV_BYTES_CAP", 1000 * kv_bytes_per_token(cfg, torch.bfloat16))
    plain = engine_defaults.default_engine_config(tiny_checkpoint, dtype="bfloat16", page_size=16)
    fp8 = engine_defaults.default_engine_config(tiny_checkpoint, dtype="bfloat16", page_size=16, kv_cache_dtype="fp8")
    assert plain.kv_budget_tokens == 992  # 1000 tokens' bytes, in whole pages
    cap_tokens = 1000 * kv_bytes_per_token(cfg, torch.bfloat16) // kv_bytes_per_token(cfg, torch.bfloat16, "fp8")
    assert fp8.kv_budget_tokens == cap_tokens // 16 * 16 > plain.kv_budget_tokens
