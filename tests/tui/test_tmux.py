"""The real `horizon chat` in a real terminal (tmux), read back with capture-pane."""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from agent.tui.session import SessionStore

from .helpers import FIX_TURN, write_replay

pytestmark = [pytest.mark.docker, pytest.mark.slow]


class Tmux:
    def __init__(self, socket: str, session: str):
        self.base = ["tmux", "-L", socket]
        self.session = session

    def run(self, *args: str) -> str:
        return subprocess.run([*self.base, *args], capture_output=True, text=True, check=True).stdout

    def screen(self) -> str:
        return self.run("capture-pane", "-p", "-t", self.session)

    def keys(self, *keys: str) -> None:
        self.run("send-keys", "-t", self.session, *keys)

    def wait_for(self, text: str, timeout: float = 60.0) -> str:
        deadline = time.monotonic() + timeout
        while True:
            screen = self.screen()
            if text in screen:
                return screen
            if time.monotonic() > deadline:
                raise AssertionError(f"{text!r} never appeared; the screen:\n{screen}")
            time.sleep(0.2)


@pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed")
def test_horizon_chat_in_tmux(tmp_path, docker_client, chat_repo):
    spec = write_replay(tmp_path / "fix.jsonl", FIX_TURN)
    home = tmp_path / "home"
    horizon = Path(sys.executable).with_name("horizon")
    env = {"HORIZON_HOME": str(home), "HORIZON_RUN_ID": os.environ["HORIZON_RUN_ID"], "TERM": "xterm-256color"}
    exports = " ".join(f"{k}={shlex.quote(v)}" for k, v in env.items())
    # Textual draws on stderr, so nothing is redirected: the pane shows exactly what a user sees.
    command = f"env {exports} {horizon} chat {shlex.quote(str(chat_repo))} --model {spec}; echo EXITED=$?; sleep 30"
    tmux = Tmux(f"horizon-test-{uuid.uuid4().hex[:8]}", "chat")
    tmux.run("new-session", "-d", "-s", "chat", "-x", "80", "-y", "24", command)
    try:
        tmux.wait_for("Ask Horizon", timeout=60)
        tmux.keys("-l", "fix the add function")
        tmux.keys("Enter")
        tmux.wait_for("Allow bash?")
        tmux.keys("y")
        tmux.wait_for("Allow str_replace?")
        tmux.wait_for("+    return a + b")  # the proposed edit, shown before it is approved
        assert (chat_repo / "calc.py").read_text().endswith("a - b\n")
        tmux.keys("y")
        tmux.wait_for("Allow bash?")
        tmux.keys("y")
        screen = tmux.wait_for("the test passes")
        assert "cache" in screen and "effort default" in screen  # the status line
        assert (chat_repo / "calc.py").read_text().endswith("a + b\n")
        tmux.run("resize-window", "-t", "chat", "-x", "120", "-y", "40")
        time.sleep(0.5)
        tmux.keys("C-c")
        time.sleep(0.3)
        tmux.keys("C-c")
        screen = tmux.wait_for("EXITED=0", timeout=30)
        assert "session saved:" in screen
    finally:
        subprocess.run([*tmux.base, "kill-server"], capture_output=True)
    (session,) = SessionStore(home / "sessions").list()
    assert session.title == "fix the add function"
