"""Helpers for the chat tests: a small repository, scripted (replay) models, the screen as text."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

GIT_ENV = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@t"}
CALC = "def add(a, b):\n    return a - b\n"
CALC_TEST = "from calc import add\nassert add(2, 3) == 5, add(2, 3)\nprint('ok')\n"


def make_repo(path: Path) -> Path:
    path.mkdir(parents=True)
    (path / "calc.py").write_text(CALC)
    (path / "test_calc.py").write_text(CALC_TEST)
    env = {**os.environ, **GIT_ENV}
    for args in (["init", "-q", "-b", "main"], ["add", "-A"], ["commit", "-q", "-m", "initial"]):
        subprocess.run(["git", "-C", str(path), *args], check=True, env=env, capture_output=True)
    return path


def call(call_id: str, name: str, **arguments) -> dict:
    return {"id": call_id, "name": name, "arguments": arguments}


def write_replay(path: Path, steps: list[dict]) -> str:
    path.write_text("".join(json.dumps(s) + "\n" for s in steps))
    return f"replay:{path}"


# A turn that runs the test, fixes the bug (an edit), reruns the test and answers in Markdown.
FIX_TURN = [
    {"reasoning_content": "The test should show what add() does.", "content": "Let me run the test.",
     "tool_calls": [call("c1", "bash", command="python3 -B test_calc.py")]},
    {"reasoning_content": "add() subtracts.", "tool_calls": [call("c2", "str_replace", path="calc.py",
                                                                   old_str="a - b", new_str="a + b")]},
    {"tool_calls": [call("c3", "bash", command="python3 -B test_calc.py")]},
    {"content": "Fixed: `add` now **adds**.\n\n- `calc.py`: `a - b` → `a + b`\n- the test passes"},
]


def screen_text(app) -> str:
    """What the terminal shows, as plain text lines."""
    return "\n".join(strip.text for strip in app.screen._compositor.render_strips())
