"""`horizon serve --kv-cache-dtype fp8`: the real process starts over an FP8 KV cache and answers."""

from __future__ import annotations

import signal
import subprocess
import sys
import time

import httpx

from .conftest import SCRIPTED_REPLY, free_port


def test_horizon_serve_with_an_fp8_kv_cache(scripted_checkpoint):
    from inference.config import ModelConfig
    from inference.kv_cache import kv_bytes_per_token

    import torch

    port = free_port()
    cmd = [sys.executable, "-m", "agent.cli.main", "serve", "--model", str(scripted_checkpoint), "--port", str(port),
           "--dtype", "float32", "--kv-cache-dtype", "fp8", "--kv-budget-tokens", "1024", "--log-level", "warning"]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        banner = proc.stdout.readline()
        no_mtp = ModelConfig.from_pretrained(scripted_checkpoint, num_nextn_predict_layers=0)  # loaded only to draft
        per_token = kv_bytes_per_token(no_mtp, torch.float32, "fp8")
        assert f"KV cache fp8: {per_token:,} B/token" in banner, banner
        deadline = time.monotonic() + 60
        while True:
            try:
                if httpx.get(f"http://127.0.0.1:{port}/health", timeout=5).status_code == 200:
                    break
            except httpx.TransportError:
                assert time.monotonic() < deadline and proc.poll() is None, "server did not come up"
                time.sleep(0.1)
        body = {"model": scripted_checkpoint.name, "prompt": "[gMASK]<sop><|user|>x<|assistant|><think>",
                "max_tokens": 40, "temperature": 0}
        reply = httpx.post(f"http://127.0.0.1:{port}/v1/completions", json=body, timeout=60).json()
        assert reply["choices"][0]["text"] == SCRIPTED_REPLY
    finally:
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=60)
    assert proc.returncode in (0, -signal.SIGTERM), out


def test_horizon_serve_rejects_an_unknown_kv_cache_dtype(tiny_checkpoint, capsys):
    from agent.cli.main import main

    try:
        code = main(["serve", "--model", str(tiny_checkpoint), "--kv-cache-dtype", "int4"])
    except SystemExit as exc:  # argparse: invalid choice
        code = exc.code
    assert code == 2 and "--kv-cache-dtype: invalid choice: 'int4'" in capsys.readouterr().err
