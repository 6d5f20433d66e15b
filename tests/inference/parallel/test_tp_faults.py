"""A real `horizon serve --tp 2` whose follower is killed mid-generation: the request in flight
gets an error, the server exits non-zero, nothing waits for a collective timeout."""

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


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _children(pid: int) -> list[int]:
    out = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        out += [int(c) for c in (task / "children").read_text().split()]
    return out


def test_killed_follower_fails_the_request_and_the_server_exits(tp_checkpoint):
    port = _port()
    # --dist-timeout 60: if a dead peer were only noticed by a timeout, this test would take a minute.
    cmd = [sys.executable, "-m", "agent.cli.main", "serve", "--model", str(tp_checkpoint), "--port", str(port),
           "--dtype", "float32", "--kv-budget-tokens", "4096", "--tp", "2", "--dist-timeout", "60",
           "--log-level", "warning"]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        lines = [proc.stdout.readline() for _ in range(3)]  # the banner and each rank's load stats
        assert any("on http://" in line for line in lines), lines
        assert any("rank 0/2" in line for line in lines) and any("rank 1/2" in line for line in lines), lines
        deadline = time.monotonic() + 60
        while httpx.get(f"http://127.0.0.1:{port}/health", timeout=5).status_code != 200:
            assert time.monotonic() < deadline
            time.sleep(0.1)
        (follower,) = _children(proc.pid)[-1:]
        body = {"model": tp_checkpoint.name, "prompt": "hello", "max_tokens": 3000, "temperature": 0,
                "stream": True, "ignore_eos": True}
        started = time.monotonic()
        events = []
        with httpx.stream("POST", f"http://127.0.0.1:{port}/v1/completions", json=body, timeout=90) as resp:
            for line in resp.iter_lines():
                if not line.startswith("data: ") or line == "data: [DONE]":
                    continue
                events.append(json.loads(line[6:]))
                if len(events) == 3:
                    os.kill(follower, signal.SIGKILL)
        errors = [e for e in events if "error" in e]
        assert errors, events[-2:]
        assert "rank 1" in errors[0]["error"]["message"]
        assert proc.wait(timeout=30) == 1
        assert time.monotonic() - started < 45
        out = proc.stdout.read()
        assert "rank 1" in out and "exited with code -9" in out, out
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_sigterm_stops_every_rank(tp_checkpoint):
    """SIGTERM to `horizon serve --tp 2` (what Ctrl-C's KeyboardInterrupt also leads to): the server
    shuts down, sends its follower Stop, and both processes are gone."""
    port = _port()
    cmd = [sys.executable, "-m", "agent.cli.main", "serve", "--model", str(tp_checkpoint), "--port", str(port),
           "--dtype", "float32", "--kv-budget-tokens", "1024", "--tp", "2", "--log-level", "warning"]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        lines = [proc.stdout.readline() for _ in range(3)]
        assert any("on http://" in line for line in lines), lines
        (follower,) = _children(proc.pid)[-1:]
        body = {"model": tp_checkpoint.name, "prompt": "hi", "max_tokens": 4, "temperature": 0}
        assert httpx.post(f"http://127.0.0.1:{port}/v1/completions", json=body, timeout=60).status_code == 200
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) in (0, -signal.SIGTERM)
        deadline = time.monotonic() + 10
        while Path(f"/proc/{follower}").exists() and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not Path(f"/proc/{follower}").exists() or "Z" in Path(f"/proc/{follower}/stat").read_text().split()[2]
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_hung_follower_fails_the_step_after_the_timeout(tp_checkpoint):
    """SIGSTOP: the follower is alive but never answers; the step fails at the collective timeout."""
    import pytest

    from inference.engine import Engine, EngineConfig, EngineError, GenerateRequest, SamplingParams

    eng = Engine(tp_checkpoint, EngineConfig(dtype="float32", kv_budget_tokens=1024,
                                             parallel={"tensor_parallel_size": 2, "timeout_s": 5, "heartbeat_s": 1}))
    follower = eng.ranks.processes[0]
    try:
        params = SamplingParams(temperature=0.0, max_tokens=4, ignore_eos=True)
        assert len(eng.generate([GenerateRequest(prompt_ids=[5, 6, 7], params=params)])[0].token_ids) == 4
        os.kill(follower.pid, signal.SIGSTOP)
        started = time.monotonic()
        with pytest.raises(RuntimeError, match="collective failed"):
            eng.generate([GenerateRequest(prompt_ids=[5, 6, 7, 8], params=params)])
        assert time.monotonic() - started < 30
        with pytest.raises(EngineError, match="the engine has stopped"):
            eng.submit(GenerateRequest(prompt_ids=[5], params=params))
    finally:
        os.kill(follower.pid, signal.SIGKILL)
        eng.shutdown()
