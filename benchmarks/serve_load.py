"""The engine stage of scripts/gpu_check.sh: `horizon serve` on a random checkpoint, then N
concurrent streaming chat requests through its OpenAI API.

    python benchmarks/serve_load.py [--dry-run] [--checkpoint DIR] [--requests 64] [--deadline-s S] [--json PATH]

Without --checkpoint it first writes a random one (config, FP8 safetensors, the tiny tokenizer
the project trains itself; no network): on a GPU the "glm53-2layer" preset, GLM-5.3 at full width
with 2 layers, its weights drawn on the GPU; with --dry-run the tiny preset on the CPU, so the
whole stage runs in a CPU test. lm_head rows past the tokenizer's vocabulary are zero (printable),
so greedy decoding streams text for every token. The server is `python -m inference.cli_serve`
(the `horizon serve` command without an installed entry point) with FP8 (W8A8) weights and an FP8
KV cache. Half the prompts are longer than index_topk tokens on the GPU, so both prefill forms
(expanded for short prompts, the indexer's selection for long ones) and sparse decode run.

Reported: seconds to write the checkpoint, to start the server (until /health answers), for two
warm-up requests (a short and a long prompt: the Triton kernels compile there); then for the N
requests together: wall time, completion tokens per second over it, time to first streamed token
p50 / p99, and how many
finished (a finish_reason and no error). Exit status 1 unless every request finished. With
--deadline-s it reports whatever finished by then (requests still running count as unfinished)
and stops the server, also when it is sent SIGTERM (the stage's time limit).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

SIZES = {  # prompt lengths alternate between the two word counts
    "gpu": dict(preset="glm53-2layer", block=(128, 128), words=(150, 1200), max_tokens=64, kv_tokens=262144,
                start_s=600.0, request_s=600.0),
    "dry": dict(preset="tiny", block=(16, 16), words=(6, 24), max_tokens=4, kv_tokens=4096,
                start_s=120.0, request_s=120.0),
}  # fmt: skip
WORDS = ("the model reads every cached key once per step and the kernel keeps the page table in registers while "
         "agents call tools run tests edit files and wait for long outputs before they answer").split()  # fmt: skip


def write_checkpoint(out: Path, size: dict, device: str) -> float:
    from inference.random_checkpoint import write_random_checkpoint

    t0 = time.perf_counter()
    write_random_checkpoint(out, size["preset"], seed=0, fp8=True, fp8_block=size["block"], shards=8,
                            device=device, printable=True)  # fmt: skip
    return time.perf_counter() - t0


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_server(checkpoint: Path, device: str, port: int, size: dict, requests: int, log) -> subprocess.Popen:
    cmd = [sys.executable, "-m", "inference.cli_serve", "--model", str(checkpoint), "--device", device,
           "--port", str(port), "--dtype", "bfloat16", "--kv-cache-dtype", "fp8", "--weight-format", "fp8_w8a8",
           "--max-running", str(requests), "--kv-budget-tokens", str(size["kv_tokens"]),
           "--served-model-name", "random", "--log-level", "warning"]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    return subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)


class Deadline:
    def __init__(self, seconds: float | None):
        self.end = time.monotonic() + seconds if seconds else float("inf")

    def left(self, cap: float) -> float:
        return max(1.0, min(cap, self.end - time.monotonic()))


async def wait_ready(client, proc: subprocess.Popen, base: str, timeout: float) -> float:
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < timeout:
        if proc.poll() is not None:
            raise RuntimeError(f"the server exited with status {proc.returncode} before answering /health")
        try:
            if (await client.get(f"{base}/health")).status_code == 200:
                return time.perf_counter() - t0
        except Exception:  # not listening yet
            pass
        await asyncio.sleep(0.5)
    raise RuntimeError(f"the server did not answer /health within {timeout:.0f} s")


def prompt(i: int, words: tuple[int, int]) -> str:
    rng = random.Random(i)
    return " ".join(rng.choice(WORDS) for _ in range(words[i % 2]))


async def one_request(client, base: str, text: str, max_tokens: int) -> dict:
    body = {"model": "random", "messages": [{"role": "user", "content": text}], "max_tokens": max_tokens,
            "temperature": 0, "ignore_eos": True, "stream": True, "stream_options": {"include_usage": True}}  # fmt: skip
    t0 = time.perf_counter()
    out = {"ttft_s": None, "finish_reason": None, "completion_tokens": 0, "prompt_tokens": 0, "error": None}
    try:
        async with client.stream("POST", f"{base}/v1/chat/completions", json=body) as resp:
            if resp.status_code != 200:
                out["error"] = f"HTTP {resp.status_code}: {(await resp.aread())[:300]!r}"
                return out
            async for line in resp.aiter_lines():
                if not line.startswith("data: ") or line == "data: [DONE]":
                    continue
                event = json.loads(line[6:])
                if "error" in event:
                    out["error"] = str(event["error"])[:300]
                for choice in event.get("choices") or []:
                    delta = choice.get("delta") or {}
                    if out["ttft_s"] is None and any(delta.get(k) for k in ("content", "reasoning_content", "tool_calls")):
                        out["ttft_s"] = time.perf_counter() - t0
                    out["finish_reason"] = choice.get("finish_reason") or out["finish_reason"]
                if event.get("usage"):
                    out["completion_tokens"] = event["usage"]["completion_tokens"]
                    out["prompt_tokens"] = event["usage"]["prompt_tokens"]
    except Exception as exc:  # a dropped connection is a failed request, reported with the rest
        out["error"] = f"{type(exc).__name__}: {exc}"
    out["latency_s"] = time.perf_counter() - t0
    return out


def percentile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q / 100 * (len(ordered) - 1))))]


async def drive(args, size: dict, checkpoint: Path, device: str, log, deadline: Deadline) -> dict:
    import httpx

    report: dict = {}
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    proc = start_server(checkpoint, device, port, size, args.requests, log)
    try:
        async with httpx.AsyncClient(timeout=httpx.Timeout(size["request_s"], connect=10.0)) as client:
            report["server_start_s"] = await wait_ready(client, proc, base, deadline.left(size["start_s"]))
            t0 = time.perf_counter()  # a short and a long prompt: both prefill forms compile here
            warm = await asyncio.wait_for(asyncio.gather(*(one_request(client, base, prompt(i, size["words"]), 2)
                                                           for i in (0, 1))), deadline.left(size["request_s"]))  # fmt: skip
            report["warmup_s"] = time.perf_counter() - t0
            if any(w["error"] for w in warm):
                raise RuntimeError(f"warm-up request failed: {next(w['error'] for w in warm if w['error'])}")
            t0 = time.perf_counter()
            tasks = [asyncio.ensure_future(one_request(client, base, prompt(i, size["words"]), size["max_tokens"]))
                     for i in range(args.requests)]  # fmt: skip
            done, pending = await asyncio.wait(tasks, timeout=deadline.left(size["request_s"]))
            wall = time.perf_counter() - t0
            for task in pending:
                task.cancel()
            results = [t.result() if t in done else {"error": "deadline", "ttft_s": None, "finish_reason": None,
                                                     "completion_tokens": 0, "prompt_tokens": 0} for t in tasks]  # fmt: skip
    except asyncio.TimeoutError:
        raise RuntimeError("the warm-up requests did not finish before the deadline") from None
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
    ttfts = [r["ttft_s"] for r in results if r["ttft_s"] is not None]
    prompts = [r["prompt_tokens"] for r in results if r["prompt_tokens"]] or [0]
    tokens = sum(r["completion_tokens"] for r in results)
    finished = sum(1 for r in results if r["finish_reason"] and not r["error"])
    report.update(
        requests=args.requests, finished=finished, wall_s=wall, completion_tokens=tokens, tokens_per_s=tokens / wall,
        prompt_tokens=[min(prompts), max(prompts)],
        ttft_p50_s=percentile(ttfts, 50), ttft_p99_s=percentile(ttfts, 99), max_tokens=size["max_tokens"],
        errors=sorted({r["error"] for r in results if r["error"]})[:5],
    )  # fmt: skip
    return report


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dry-run", action="store_true", help="tiny checkpoint, server on the CPU")
    parser.add_argument("--checkpoint", type=Path, default=None, help="serve this one instead of writing one")
    parser.add_argument("--requests", type=int, default=64)
    parser.add_argument("--deadline-s", type=float, default=None, help="report what finished within this many seconds")
    parser.add_argument("--json", type=Path, default=None)
    parser.add_argument("--server-log", type=Path, default=None, help="the server's output (default: a temp file)")
    args = parser.parse_args(argv)
    deadline = Deadline(args.deadline_s)
    # A stage time limit (SIGTERM) unwinds like an error, so the server is stopped, not orphaned.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(124))
    import torch

    if not args.dry_run and not torch.cuda.is_available():
        print("serve_load: needs a GPU (CUDA); --dry-run runs the same stage on the CPU at a tiny size.")
        return 0
    device = "cpu" if args.dry_run else "cuda"
    size = SIZES["dry" if args.dry_run else "gpu"]
    report: dict = {"device": torch.cuda.get_device_name() if device == "cuda" else "cpu", "preset": size["preset"]}
    with tempfile.TemporaryDirectory(prefix="serve-load-") as tmp:
        checkpoint = args.checkpoint
        if checkpoint is None:
            checkpoint = Path(tmp) / "checkpoint"
            report["checkpoint_write_s"] = write_checkpoint(checkpoint, size, device)
            if device == "cuda":
                torch.cuda.empty_cache()  # the server is another process: leave it the memory
            print(f"wrote a random {size['preset']} checkpoint (FP8) in {report['checkpoint_write_s']:.1f} s", flush=True)
        log_path = args.server_log or Path(tmp) / "server.log"
        with open(log_path, "w") as log:
            try:
                report.update(asyncio.run(drive(args, size, checkpoint, device, log, deadline)))
            except RuntimeError as exc:
                report["error"] = str(exc)
            except SystemExit:
                report["error"] = "stopped by SIGTERM (the stage's time limit)"
        if "error" in report or report.get("finished") != args.requests:
            print(f"--- server log (last lines of {log_path}) ---\n" + "".join(open(log_path).readlines()[-40:]))
    ok = "error" not in report and report["finished"] == args.requests
    if "error" in report:
        print(f"serve_load: FAILED: {report['error']}")
    else:
        ms = lambda s: "-" if s is None else f"{1e3 * s:.0f} ms"  # noqa: E731
        print(f"serve_load on {report['device']} ({size['preset']}, FP8 weights + FP8 KV): server up in "
              f"{report['server_start_s']:.1f} s, warm-up requests {report['warmup_s']:.1f} s")
        print(f"{args.requests} concurrent streaming requests, prompts {report['prompt_tokens'][0]}-"
              f"{report['prompt_tokens'][1]} tokens, {size['max_tokens']} new tokens each: {report['finished']}/"
              f"{args.requests} finished in {report['wall_s']:.1f} s; {report['tokens_per_s']:.1f} tok/s; "
              f"TTFT p50 {ms(report['ttft_p50_s'])} p99 {ms(report['ttft_p99_s'])}")  # fmt: skip
        if report["errors"]:
            print("errors:", *report["errors"], sep="\n  ")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(report, indent=1))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
