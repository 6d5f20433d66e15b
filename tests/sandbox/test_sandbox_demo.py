"""`horizon sandbox demo` (the README's main job) runs end to end and leaves nothing behind."""

from __future__ import annotations

import subprocess
import sys


def test_demo_command(base_image, docker_client):
    out = subprocess.run([sys.executable, "-m", "agent.cli.main", "sandbox", "demo"],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stdout + out.stderr
    for expected in ("GREETING=hello", "/tmp/demo", "TIMED OUT", "still here in /tmp/demo", "bytes cut",
                     "HORIZON SANDBOXES KEEP AGENTS CONTAINED", "all steps behaved as expected"):
        assert expected in out.stdout
    container_line = next(line for line in out.stdout.splitlines() if line.startswith("Sandbox closed"))
    short_id = container_line.split()[3]
    assert not docker_client.containers.list(sparse=True, all=True, filters={"id": short_id})
