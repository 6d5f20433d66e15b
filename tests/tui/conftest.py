"""Fixtures for the chat tests: a repository mounted into a real Docker sandbox, and an app factory."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from agent.backends import make_backend
from agent.config import load_config
from agent.tools import ToolSet, builtin_tools
from agent.tui.app import ChatApp
from agent.tui.session import SessionStore

from .helpers import make_repo, write_replay


@pytest.fixture
def chat_repo(tmp_path: Path) -> Path:
    return make_repo(tmp_path / "demo-repo")


@pytest.fixture
def chat_sandbox(docker_client, chat_repo):
    from sandbox import Mount, Sandbox, SandboxConfig

    config = SandboxConfig(mounts=[Mount(source=str(chat_repo), target="/workspace")])
    with Sandbox.start(config) as sandbox:
        yield sandbox


@pytest.fixture
def sessions_dir(tmp_path: Path) -> Path:
    return tmp_path / "sessions"


@pytest.fixture
def make_app(tmp_path, chat_repo, chat_sandbox, sessions_dir):
    """make_app(steps, **ChatApp kwargs): the real app over the real tools with a scripted model."""
    counter = iter(range(1000))

    def make(steps: list[dict], **kwargs) -> ChatApp:
        spec = write_replay(tmp_path / f"replay-{next(counter)}.jsonl", steps)
        config = load_config(None, {"require_finish_tool": False})
        return ChatApp(
            config=config,
            backend=make_backend(spec, config),
            tools=ToolSet(builtin_tools(chat_sandbox, config.tools)),
            sandbox=chat_sandbox,
            store=SessionStore(sessions_dir),
            repo=chat_repo,
            model_spec="replay:script.jsonl",
            make_backend=make_backend,
            clock=lambda: 754.0,  # a fixed clock: the status line shows the same elapsed time in every run
            **kwargs,
        )

    return make


@pytest.fixture
def recorded_session(sessions_dir) -> str:
    """A session recorded from a real run (fix calc.py; see test_snapshots.py), ready to resume."""
    shutil.copytree(Path(__file__).parent / "fixtures" / "session-fix", sessions_dir / "session-fix")
    return "session-fix"


@pytest.fixture
def anyio_backend():
    return "asyncio"  # Textual runs on asyncio
