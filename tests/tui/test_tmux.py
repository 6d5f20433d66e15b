"""The real `horizon chat` in a real terminal (tmux), read back with capture-pane."""

from __future__ import annotations

import os
import shlex
import shutil
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from agent.tui.session import SessionStore

from .helpers import FIX_TURN, write_replay
from sandbox.docker_client import remove_container

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


@pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed")
@pytest.mark.parametrize("how", ["kill", "close-terminal"])
def test_kill_or_a_closed_terminal_quits_chat_cleanly(tmp_path, docker_client, chat_repo, how):
    """SIGTERM (`kill`) and SIGHUP (the terminal closed) mid-turn: the container goes, the session is saved."""
    spec = write_replay(tmp_path / "wait.jsonl", [
        {"tool_calls": [{"id": "c1", "name": "bash", "arguments": {"command": "sleep 60", "timeout": 120}}]},
        {"content": "done"},
    ])
    home, pid_file = tmp_path / "home", tmp_path / "chat.pid"
    run_id = f"{os.environ['HORIZON_RUN_ID']}-chat-{how}"
    label = {"label": f"dev.horizon.run={run_id}"}
    horizon = Path(sys.executable).with_name("horizon")
    env = {"HORIZON_HOME": str(home), "HORIZON_RUN_ID": run_id, "TERM": "xterm-256color"}
    exports = " ".join(f"{k}={shlex.quote(v)}" for k, v in env.items())
    chat = f"{horizon} chat {shlex.quote(str(chat_repo))} --model {spec} --mode auto"
    command = f"sh -c 'echo $$ > {pid_file}; exec env {exports} {chat}'; echo EXITED=$?; sleep 30"
    tmux = Tmux(f"horizon-test-{uuid.uuid4().hex[:8]}", "chat")
    tmux.run("new-session", "-d", "-s", "chat", "-x", "100", "-y", "30", command)
    try:
        tmux.wait_for("Ask Horizon", timeout=60)
        tmux.keys("-l", "wait a minute")
        tmux.keys("Enter")
        tmux.wait_for("sleep 60")
        assert len(docker_client.containers.list(sparse=True, filters=label)) == 1
        pid = int(pid_file.read_text())
        if how == "kill":
            os.kill(pid, signal.SIGTERM)
            assert "session saved:" in tmux.wait_for("EXITED=0", timeout=60)
        else:
            subprocess.run([*tmux.base, "kill-server"], capture_output=True)
        deadline = time.monotonic() + 60
        while _alive(pid):
            assert time.monotonic() < deadline, "horizon chat did not exit"
            time.sleep(0.2)
        leaked = docker_client.containers.list(sparse=True, all=True, filters=label)
        assert leaked == [], [c.attrs.get("Names") for c in leaked]
    finally:
        subprocess.run([*tmux.base, "kill-server"], capture_output=True)
        for container in docker_client.containers.list(sparse=True, all=True, filters=label):
            remove_container(docker_client, container.id)
    (session,) = SessionStore(home / "sessions").list()
    assert session.title == "wait a minute"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0] != "Z"


@pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed")
def test_chat_offers_the_configured_plugins_and_respects_disabled_tools(tmp_path, docker_client, chat_repo):
    """`horizon chat` builds its tools like `horizon run`: enabled plugins in, disabled built-ins out."""
    spec = write_replay(tmp_path / "idle.jsonl", [{"content": "unused"}])
    config = tmp_path / "horizon.toml"
    config.write_text('plugins = ["line_count"]\ndisabled_tools = ["search"]\n')
    horizon = Path(sys.executable).with_name("horizon")
    env = {"HORIZON_HOME": str(tmp_path / "home"), "HORIZON_RUN_ID": os.environ["HORIZON_RUN_ID"], "TERM": "xterm-256color"}
    exports = " ".join(f"{k}={shlex.quote(v)}" for k, v in env.items())
    command = (f"env {exports} {horizon} chat {shlex.quote(str(chat_repo))} --model {spec} "
               f"--config {shlex.quote(str(config))}; echo EXITED=$?; sleep 30")
    tmux = Tmux(f"horizon-test-{uuid.uuid4().hex[:8]}", "chat")
    tmux.run("new-session", "-d", "-s", "chat", "-x", "120", "-y", "40", command)
    try:
        tmux.wait_for("Ask Horizon", timeout=60)
        tmux.keys("-l", "/tools")
        tmux.keys("Enter")
        screen = tmux.wait_for("line_count")
        listed = {line.split()[0] for line in screen.splitlines() if line.startswith(" ") and line.strip()}
        assert {"bash", "str_replace", "line_count"} <= listed and "search" not in listed
        tmux.keys("C-c")
        time.sleep(0.3)
        tmux.keys("C-c")
        tmux.wait_for("EXITED=0", timeout=30)
    finally:
        subprocess.run([*tmux.base, "kill-server"], capture_output=True)
