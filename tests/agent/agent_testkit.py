"""Helpers shared by the agent tests (replay scripts)."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

_ids = itertools.count(1)


def call(name: str, call_id: str | None = None, **arguments) -> dict:
    """One tool call in the replay file's OpenAI shape."""
    return {"id": call_id or f"call_{next(_ids)}",
            "type": "function", "function": {"name": name, "arguments": json.dumps(arguments)}}


def write_replay(path: Path, steps: list[dict]) -> Path:
    path.write_text("".join(json.dumps(step) + "\n" for step in steps), encoding="utf-8")
    return path


def wait_for_file(sandbox, path: str, polls: int = 600) -> None:
    """Until `path` exists in the sandbox (a command announcing it has started); read_file maps
    the path on a LocalSandbox too."""
    import time

    for _ in range(polls):
        try:
            sandbox.read_file(path)
            return
        except Exception:  # not there yet
            time.sleep(0.1)
    raise AssertionError(f"{path} never appeared in the sandbox")


def cancel_a_running_bash(tools, sandbox, workdir: str):
    """Start `sleep 300` through the ToolSet in a thread (the shell is in `workdir`), cancel it once it
    runs; the call's result."""
    import threading

    box = {}
    worker = threading.Thread(target=lambda: box.update(result=tools.call(
        "bash", {"command": "touch .sleep-started && sleep 300", "timeout": 1000})))
    worker.start()
    wait_for_file(sandbox, f"{workdir}/.sleep-started")
    tools.cancel()
    worker.join()
    return box["result"]
