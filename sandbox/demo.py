"""`horizon sandbox demo`: a guided tour of one sandbox, printing what happens at each step."""

from __future__ import annotations

import tempfile
import time
from pathlib import Path

from sandbox.config import SandboxConfig, format_size
from sandbox.docker_sandbox import Sandbox
from sandbox.result import ExecResult


def _show(step: str, command: str, result: ExecResult) -> None:
    print(f"\n$ {command}")
    for line in result.output.rstrip("\n").splitlines() or ["(no output)"]:
        print(f"  | {line}")
    flags = [f"exit {result.exit_code}", f"{result.duration * 1000:.0f} ms"]
    if result.timed_out:
        flags.append("TIMED OUT")
    if result.truncated:
        flags.append(f"truncated from {result.output_bytes} bytes")
    print(f"  -> {step}: {', '.join(flags)}")


def run_demo(config: SandboxConfig | None = None) -> int:
    config = config or SandboxConfig(memory="512m", pids_limit=256)
    print(f"Starting a sandbox from {config.image} (network {'on' if config.network else 'off'}, "
          f"memory {format_size(config.memory_bytes)}, {config.cpus:g} CPU, at most {config.pids_limit} processes)")
    started = time.monotonic()
    with Sandbox.start(config) as sb:
        print(f"container {sb.container_id[:12]} ready in {time.monotonic() - started:.2f}s")

        def run(step: str, command: str, **kw) -> ExecResult:
            result = sb.exec(command, **kw)
            _show(step, command, result)
            return result

        print("\n== A persistent shell: directory, variables and functions carry over between calls")
        run("state is set", "cd /tmp && mkdir -p demo && cd demo && export GREETING=hello && greet() { echo \"$GREETING, $1\"; }")
        after = run("state persisted", "pwd; echo \"GREETING=$GREETING\"; greet sandbox")
        print("\n== Exit codes, isolation and limits")
        run("exit codes come back", "ls /does-not-exist")
        run("only the loopback interface (no network)", "ls /sys/class/net")
        run("a timeout kills the command's processes", "sleep 100; echo never printed", timeout=2)
        run("the shell is still usable after the timeout", "echo still here in $(pwd)")
        run("output is bounded (head + tail kept)", "seq 1 100000", output_limit=120)

        print("\n== Files in and out (tar archives through the Docker API)")
        with tempfile.TemporaryDirectory() as tmp:
            host_in = Path(tmp) / "notes.txt"
            host_in.write_text("horizon sandboxes keep agents contained\n")
            where = sb.copy_in(host_in, "/workspace")
            print(f"copied host {host_in} -> sandbox {where}")
            run("the file is inside", "cd /workspace && wc -c notes.txt && tr a-z A-Z < notes.txt > NOTES.txt && ls -l")
            host_out = sb.copy_out("/workspace/NOTES.txt", Path(tmp) / "from-sandbox.txt")
            print(f"copied sandbox /workspace/NOTES.txt -> host {host_out}: {host_out.read_text().strip()!r}")
        container_id = sb.container_id
    print(f"\nSandbox closed: container {container_id[:12]} removed.")
    ok = "GREETING=hello" in after.output and "/tmp/demo" in after.output
    print("Demo finished: " + ("all steps behaved as expected." if ok else "UNEXPECTED: state did not persist."))
    return 0 if ok else 1
