"""Helpers for the batch tests: small real git repositories and scripted (replay) models."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

GIT_ENV = {
    "GIT_AUTHOR_NAME": "t",
    "GIT_AUTHOR_EMAIL": "t@t",
    "GIT_COMMITTER_NAME": "t",
    "GIT_COMMITTER_EMAIL": "t@t",
}
BUGGY_CALC = "def add(a, b):\n    return a - b\n"
CALC_TEST = "from calc import add\nassert add(2, 3) == 5, add(2, 3)\nprint('ok')\n"


def git(repo: Path, *args: str) -> str:
    env = {**os.environ, **GIT_ENV}
    proc = subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True, env=env, check=True)
    return proc.stdout.strip()


def make_repo(path: Path, files: dict[str, str]) -> Path:
    path.mkdir(parents=True)
    git(path, "init", "-q", "-b", "main")
    for name, text in files.items():
        (path / name).parent.mkdir(parents=True, exist_ok=True)
        (path / name).write_text(text)
    git(path, "add", "-A")
    git(path, "commit", "-q", "-m", "initial")
    return path


_call_ids = iter(range(1, 1_000_000))


def call(name: str, **arguments) -> dict:
    return {"id": f"call_{next(_call_ids)}", "name": name, "arguments": arguments}


def step(*calls: dict, content: str | None = None, reasoning: str | None = None) -> dict:
    out: dict = {"tool_calls": list(calls)} if calls else {}
    if content:
        out["content"] = content
    if reasoning:
        out["reasoning_content"] = reasoning
    return out


def write_replay(path: Path, steps: list[dict]) -> str:
    path.write_text("".join(json.dumps(s) + "\n" for s in steps))
    return f"replay:{path}"


FIX_STEPS = [
    step(call("bash", command="python3 test_calc.py"), reasoning="Run the test first."),
    step(call("str_replace", path="calc.py", old_str="a - b", new_str="a + b")),
    step(call("bash", command="python3 test_calc.py")),
    step(call("finish", summary="add() subtracted; now it adds")),
]
