#!/usr/bin/env python3
"""Per-command latency of Horizon's persistent sandbox shell versus one `docker exec` per command.

Both run a trivial command (`true`, and `echo hello` for a command with output) in the same container, interleaved so that machine load hits
both alike; the baseline is what a Docker-SDK runtime does per command (exec_create + exec_start),
plus the `docker exec` CLI when it is installed. Also reports container start-to-first-command.
Goal: our median at most 1/5 of `docker exec`'s.

    python benchmarks/sandbox_latency.py           # 200 commands each, 3 starts
    python benchmarks/sandbox_latency.py --quick   # 20 commands each, 1 start
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from sandbox import Sandbox, SandboxConfig  # noqa: E402


def _stats(samples: list[float]) -> tuple[float, float]:
    ordered = sorted(samples)
    return statistics.median(ordered), ordered[min(len(ordered) - 1, int(0.9 * len(ordered)))]


def measure(commands: int, starts: int) -> dict[str, tuple[float, float]]:
    start_times = []
    for _ in range(starts):
        t0 = time.perf_counter()
        with Sandbox.start(SandboxConfig()) as sb:
            sb.exec("true")
            start_times.append(time.perf_counter() - t0)
    shell, shell_out, sdk_exec, sdk_out, cli_exec = [], [], [], [], []
    docker_cli = shutil.which("docker")
    with Sandbox.start(SandboxConfig()) as sb:
        container = sb._client.containers.get(sb.container_id)
        for _ in range(3):  # warm up both paths
            sb.exec("true")
            container.exec_run(["true"])
        for _ in range(commands):
            t0 = time.perf_counter()
            result = sb.exec("true")
            shell.append(time.perf_counter() - t0)
            assert result.exit_code == 0
            t0 = time.perf_counter()
            code, _ = container.exec_run(["true"])
            sdk_exec.append(time.perf_counter() - t0)
            assert code == 0
            t0 = time.perf_counter()
            assert sb.exec("echo hello").output == "hello\n"
            shell_out.append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            _code, output = container.exec_run(["echo", "hello"])
            sdk_out.append(time.perf_counter() - t0)
            assert output == b"hello\n"
            if docker_cli:
                t0 = time.perf_counter()
                subprocess.run([docker_cli, "exec", sb.container_id, "true"], check=True)
                cli_exec.append(time.perf_counter() - t0)
    out = {"start to first command": _stats(start_times), "persistent shell": _stats(shell),
           "docker exec (SDK)": _stats(sdk_exec), "persistent shell, echo": _stats(shell_out),
           "docker exec (SDK), echo": _stats(sdk_out)}
    if cli_exec:
        out["docker exec (CLI)"] = _stats(cli_exec)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="20 commands, 1 start (for tests)")
    parser.add_argument("--commands", type=int, default=None)
    parser.add_argument("--starts", type=int, default=None)
    args = parser.parse_args(argv)
    commands = args.commands or (20 if args.quick else 200)
    starts = args.starts or (1 if args.quick else 3)
    results = measure(commands, starts)
    print(f"{'':28s} {'median':>10s} {'p90':>10s}   ({commands} commands, {starts} starts)")
    for name, (median, p90) in results.items():
        print(f"{name:28s} {median * 1000:8.1f}ms {p90 * 1000:8.1f}ms")
    shell, sdk = results["persistent shell"][0], results["docker exec (SDK)"][0]
    print(f"ratio persistent shell / docker exec (SDK), median: {shell / sdk:.3f} "
          f"(goal <= 0.200: {'met' if shell / sdk <= 0.2 else 'NOT met'})")
    echo_ratio = results["persistent shell, echo"][0] / results["docker exec (SDK), echo"][0]
    print(f"ratio with output (echo hello), median: {echo_ratio:.3f}")
    if "docker exec (CLI)" in results:
        print(f"ratio persistent shell / docker exec (CLI), median: {shell / results['docker exec (CLI)'][0]:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
