"""The TUI's pure parts: approval policy, slash parsing and completion, sessions, conversation restore."""

from __future__ import annotations

import pytest

from agent.events import Compacted, ContentDelta, MessageAppended
from agent.tui.approval import ApprovalPolicy
from agent.tui.commands import complete_command, parse
from agent.tui.completion import attach, complete, mentioned_files, read_in_repo
from agent.tui.session import Notice, SessionStore, UserTurn
from agent.tui.workspace_ops import restore_conversation


def test_approval_modes():
    policy = ApprovalPolicy(read_only_tools=frozenset({"view"}))
    assert policy.needs_user("bash") and policy.needs_user("str_replace") and not policy.needs_user("view")
    policy.mode = "auto-edit"
    assert policy.needs_user("bash") and not policy.needs_user("str_replace")
    policy.mode = "auto"
    assert not policy.needs_user("bash")
    policy.mode = "ask"
    policy.always_allowed.add("bash")
    assert not policy.needs_user("bash") and policy.needs_user("create")
    assert [policy.cycle(), policy.cycle(), policy.cycle()] == ["auto-edit", "auto", "ask"]


def test_slash_parsing_and_completion(tmp_path):
    assert parse("/effort high") == ("effort", "high") and parse("hello /x") is None
    assert complete_command("re") == ["resume"] and set(complete_command("")) >= {"help", "exit", "undo"}
    assert complete("/und", tmp_path) == ("/undo ", ["undo"])
    assert complete("/", tmp_path)[0] == "/"
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "calc.py").write_text("x = 1\n")
    (tmp_path / "src" / "cache.py").write_text("")
    (tmp_path / "setup.py").write_text("")
    assert complete("look at @sr", tmp_path) == ("look at @src/", ["src/"])
    text, names = complete("look at @src/ca", tmp_path)
    assert text == "look at @src/ca" and names == ["src/cache.py", "src/calc.py"]
    assert complete("look at @src/cal", tmp_path)[0] == "look at @src/calc.py"


def test_mentions_attach_files_inside_the_workspace_only(tmp_path):
    (tmp_path / "a.py").write_text("print('a')\n")
    files = mentioned_files("explain @a.py and @missing.py and @../etc/passwd", tmp_path)
    assert files == [(tmp_path / "a.py").resolve()]
    message = attach("explain @a.py", files, tmp_path)
    assert message.startswith("explain @a.py\n\n<attached_file path=\"a.py\">\nprint('a')")
    # An image goes to the model as an image (agent/images.py), not as text in an <attached_file>.
    (tmp_path / "shot.png").write_bytes(b"\x89PNG\r\n\x1a\n")
    shots = mentioned_files("see @shot.png and @a.py", tmp_path)
    assert attach("see @shot.png and @a.py", shots, tmp_path).count("<attached_file") == 1
    assert read_in_repo(tmp_path, "shot.png").startswith(b"\x89PNG")
    with pytest.raises(FileNotFoundError, match="outside the repository"):
        read_in_repo(tmp_path, "../x.png")


def test_sessions_persist_as_they_go_and_tolerate_a_torn_line(tmp_path):
    store = SessionStore(tmp_path)
    session = store.create("/repo", "replay:x.jsonl", session_id="s1")
    session.append(UserTurn(text="fix the bug\nplease"))
    session.append(ContentDelta(text="ok"))
    session.append(Notice(text="hi", format="markdown"))
    with session.events_path.open("a") as f:
        f.write('{"type": "content_del')
    reopened = store.open("s")
    assert reopened.meta.title == "fix the bug"
    assert [type(r).__name__ for r in reopened.records()] == ["UserTurn", "ContentDelta", "Notice"]
    store.create("/repo", "replay:y.jsonl", session_id="s2")
    assert store.open().id == "s2"
    assert [m.id for m in store.list()] == ["s2", "s1"]


def test_restore_conversation_replays_compaction_and_answers_dangling_calls():
    system = {"role": "system", "content": "sys"}
    call = {"role": "assistant", "tool_calls": [{"id": "c1", "name": "bash", "arguments": {"command": "ls"}}]}
    records = [
        MessageAppended(message=system),
        MessageAppended(message={"role": "user", "content": "old"}),
        Compacted(stage="elide", tokens_before=10, tokens_after=5, messages=[system, {"role": "user", "content": "new"}]),
        MessageAppended(message=call),
    ]
    messages = restore_conversation(records)
    assert [m.role for m in messages] == ["system", "user", "assistant", "tool"]
    assert messages[1].content == "new" and messages[3].tool_call_id == "c1"


def test_edit_preview_names_absolute_paths_with_one_slash():
    from agent.tui.widgets.diff_view import edit_preview

    diff = edit_preview("str_replace", {"path": "/workspace/calc.py", "old_str": "1", "new_str": "2"}, "x = 1\n")
    assert diff.startswith("--- a/workspace/calc.py\n+++ b/workspace/calc.py\n") and "+x = 2" in diff
    relative = edit_preview("create", {"path": "src/new.py", "file_text": "y\n"}, None)
    assert relative.startswith("--- a/src/new.py\n+++ b/src/new.py\n")


def test_effort_words_of_the_chat_cli_and_slash_command():
    import argparse
    import re

    import pytest

    from agent.tui.cli import register
    from agent.tui.slash import effort_setting

    parser = argparse.ArgumentParser()
    register(parser.add_subparsers())
    for word in ("none", "low", "medium", "high", "max"):
        assert effort_setting(parser.parse_args(["chat", "--effort", word]).effort) == word
    assert effort_setting("default") is None and effort_setting("xhigh") == "max" and effort_setting("minimal") == "low"
    with pytest.raises(ValueError, match=re.escape("one of none|low|medium|high|max|default, got 'extreme'")):
        effort_setting("extreme")
