"""A live server on 127.0.0.1 (free port) over the real engine and a tiny checkpoint.

The checkpoint is the model engineer's random tiny checkpoint with crafted weights: every layer's
output projections are zeroed, so the next token depends only on the current one, and
embed/lm_head encode a chain that makes greedy decoding write SCRIPTED_REPLY after `<think>`.
That gives a deterministic tool call from a real forward pass; sampled output stays random text.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx

import pytest
import torch
from safetensors.torch import load_file, save_file

SCRIPTED_REPLY = ("Need files</think>Listing:<tool_call>bash<arg_key>command</arg_key>"
                  "<arg_value>ls -la</arg_value></tool_call>")
BASH_TOOL = {"type": "function", "function": {
    "name": "bash", "description": "Run a shell command",
    "parameters": {"type": "object", "properties": {"command": {"type": "string"}}, "required": ["command"]}}}


def free_port() -> int:
    """A TCP port nothing listens on now (for servers the tests start as processes)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def serve_and_complete(checkpoint: Path, *options: str, model_name: str | None = None,
                       env: dict[str, str] | None = None) -> tuple[str, str]:
    """Start a real `horizon serve` process on the scripted checkpoint with these options (and
    these environment variables on top of ours), wait for /health, ask one greedy completion (of
    `model_name`, default the folder's name), stop it with SIGTERM; -> (its banner line, the
    completion's text)."""
    port = free_port()
    cmd = [sys.executable, "-m", "agent.cli.main", "serve", "--model", str(checkpoint), "--port", str(port),
           "--dtype", "float32", "--kv-budget-tokens", "1024", "--log-level", "warning", *options]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env=None if env is None else {**os.environ, **env})
    try:
        banner = proc.stdout.readline()  # printed once the engine is up
        deadline = time.monotonic() + 60
        while True:
            try:
                if httpx.get(f"http://127.0.0.1:{port}/health", timeout=5).status_code == 200:
                    break
            except httpx.TransportError:
                assert time.monotonic() < deadline and proc.poll() is None, f"server did not come up: {banner}"
                time.sleep(0.1)
        body = {"model": model_name or checkpoint.name, "prompt": "[gMASK]<sop><|user|>x<|assistant|><think>",
                "max_tokens": 40, "temperature": 0}
        text = httpx.post(f"http://127.0.0.1:{port}/v1/completions", json=body, timeout=60).json()["choices"][0]["text"]
    finally:
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=60)
    # uvicorn shuts down gracefully, then re-raises the captured SIGTERM so the exit status says so.
    assert proc.returncode in (0, -signal.SIGTERM), out
    return banner, text


def write_scripted_checkpoint(out: Path) -> Path:
    from inference.random_checkpoint import write_random_checkpoint
    from inference.tokenizer import Tokenizer

    # latent_norm_eps 1e-6: the engine tests' and the benchmark's (a constant of a compiled decode
    # graph, so `serve --cuda-graphs` finds their graph in inductor's cache); with every o_proj
    # zeroed below, attention (where it acts) does not reach the reply.
    write_random_checkpoint(out, preset="tiny", seed=0, overrides=dict(latent_norm_eps=1e-6))
    tok = Tokenizer.from_pretrained(out)
    chain = [tok.token_id("<think>"), *tok.encode(SCRIPTED_REPLY), tok.token_id("<|observation|>")]
    if len(set(chain[:-1])) != len(chain) - 1:
        raise AssertionError("the scripted reply must not repeat a token (next token = f(current token))")
    index = json.loads((out / "model.safetensors.index.json").read_text())["weight_map"]
    hidden = json.loads((out / "config.json").read_text())["hidden_size"]
    # Orthonormal embeddings for the chain tokens give every greedy step a wide margin.
    basis, _ = torch.linalg.qr(torch.randn(hidden, len(chain) - 1, generator=torch.Generator().manual_seed(0)))
    for shard in sorted(set(index.values())):
        tensors = load_file(out / shard)
        for name, t in tensors.items():
            if name.endswith(("o_proj.weight", "down_proj.weight")):
                tensors[name] = torch.zeros_like(t)
        if "model.embed_tokens.weight" in tensors:
            embed = tensors["model.embed_tokens.weight"].float()
            for i, tid in enumerate(chain[:-1]):
                embed[tid] = basis[:, i] * 4.0
            tensors["model.embed_tokens.weight"] = embed.to(tensors["model.embed_tokens.weight"].dtype)
        if "model.norm.weight" in tensors:
            tensors["model.norm.weight"] = torch.ones_like(tensors["model.norm.weight"])
        if "lm_head.weight" in tensors:
            head = torch.zeros_like(tensors["lm_head.weight"], dtype=torch.float32)
            for i, (cur, nxt) in enumerate(zip(chain, chain[1:])):
                head[nxt] += basis[:, i] * 8.0
            tensors["lm_head.weight"] = head.to(tensors["lm_head.weight"].dtype)
        save_file(tensors, out / shard, metadata={"format": "pt"})
    return out


@pytest.fixture(scope="session")
def scripted_checkpoint(tmp_path_factory) -> Path:
    return write_scripted_checkpoint(tmp_path_factory.mktemp("ckpt-scripted"))


@pytest.fixture(scope="session")
def live_server(scripted_checkpoint):
    from inference.engine.engine_config import EngineConfig
    from inference.server.runner import BackgroundServer, build_state

    config = EngineConfig(dtype="float32", kv_budget_tokens=32768, page_size=16, max_running=32)
    state = build_state(scripted_checkpoint, config, served_model_name="glm-tiny")
    with BackgroundServer(state) as server:
        yield server


@pytest.fixture()
def client(live_server):
    import openai

    with openai.OpenAI(base_url=live_server.base_url, api_key="unused", max_retries=0, timeout=120) as c:
        yield c


@pytest.fixture(scope="session")
def tokenizer(tmp_path_factory):
    from inference.tokenizer import Tokenizer
    from inference.tokenizer_training import write_tokenizer_files

    out = tmp_path_factory.mktemp("server-tokenizer")
    write_tokenizer_files(out)
    return Tokenizer.from_pretrained(out)


@pytest.fixture(scope="session")
def random_server(tmp_path_factory):
    """A live server over a plain random-weight tiny checkpoint (no scripted reply): whatever it
    samples is noise, which is what constrained decoding must still shape."""
    from inference.engine.engine_config import EngineConfig
    from inference.random_checkpoint import write_random_checkpoint
    from inference.server.runner import BackgroundServer, build_state

    ckpt = write_random_checkpoint(tmp_path_factory.mktemp("ckpt-random"), preset="tiny", seed=1)
    config = EngineConfig(dtype="float32", kv_budget_tokens=262144, page_size=16, max_running=128,
                          reasoning_budgets={"low": 16})
    state = build_state(ckpt, config, served_model_name="glm-random")
    with BackgroundServer(state) as server:
        yield server
