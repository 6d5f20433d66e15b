"""`horizon chat` argument handling and the read-only workspace mount."""

from __future__ import annotations

import pytest

from agent.cli.main import main
from agent.config import load_config
from agent.tools import ToolSet, builtin_tools
from agent.tui.cli import open_workspace_sandbox


def test_chat_needs_a_model_or_a_session_to_resume(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("HORIZON_HOME", str(tmp_path / "home"))
    assert main(["chat", str(tmp_path)]) == 2
    assert "--model is required" in capsys.readouterr().err
    assert main(["chat", str(tmp_path), "--resume"]) == 2
    assert "no saved sessions" in capsys.readouterr().err
    assert main(["chat", str(tmp_path / "nope"), "--model", "replay:x"]) == 2
    assert "is not a folder" in capsys.readouterr().err
    assert main(["chat", str(tmp_path), "--model", "nonsense"]) == 2
    assert "expected one of embedded:PATH, openai:URL, replay:FILE" in capsys.readouterr().err


@pytest.mark.docker
def test_read_only_mount_refuses_edits(docker_client, chat_repo):
    config = load_config()
    with open_workspace_sandbox(chat_repo, read_only=True, config=config) as sandbox:
        tools = ToolSet(builtin_tools(sandbox, config.tools))
        result = tools.call("str_replace", {"path": "calc.py", "old_str": "a - b", "new_str": "a + b"})
        assert result.is_error
        assert "a - b" in tools.call("view", {"path": "calc.py"}).output
    assert (chat_repo / "calc.py").read_text().endswith("a - b\n")


def test_chat_resume_of_an_unknown_session_is_a_usage_error(tmp_path, monkeypatch, capsys):
    from agent.tui.session import SessionStore

    monkeypatch.setenv("HORIZON_HOME", str(tmp_path / "home"))
    saved = SessionStore().create(str(tmp_path), "replay:x")
    for model in ([], ["--model", "replay:x"]):
        assert main(["chat", str(tmp_path), "--resume", "nosuchid", *model]) == 2
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and "no session matching 'nosuchid'" in err
        assert f"recent: {saved.id}" in err and "/sessions" in err
