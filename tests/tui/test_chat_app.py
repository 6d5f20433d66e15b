"""The chat app driven through Textual's Pilot, with real tools in a real Docker sandbox."""

from __future__ import annotations

import asyncio

import pytest

from agent.events import FinishEvent, ToolOutput
from agent.tui.session import SessionStore, UserTurn
from agent.tui.widgets.blocks import AnswerBlock, ToolBlock
from agent.tui.widgets.diff_view import DiffView

from .helpers import FIX_TURN, call, screen_text

pytestmark = [pytest.mark.docker, pytest.mark.anyio]


async def until(pilot, predicate, timeout: float = 20.0, what: str = "condition") -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not predicate():
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"timed out waiting for {what}\n{screen_text(pilot.app)}")
        await pilot.pause(0.05)


def turn_settled(app) -> bool:
    # The worker thread ends before the UI has drawn its last events; stats.busy clears only when
    # the UI handles TurnDone, which the worker posts after every record of the turn.
    return not app.controller.busy and not app.stats.busy


def approval_shown(app) -> bool:
    return app.approval_pending and app.query_one("#approval").display


async def test_request_approve_command_and_edit_then_see_diff(make_app, chat_repo):
    app = make_app(FIX_TURN)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.press(*"fix the add function", "enter")
        await until(pilot, lambda: approval_shown(app), what="the bash approval")
        assert "Allow bash?" in screen_text(app) and "python3 -B test_calc.py" in screen_text(app)
        await pilot.press("y")
        await until(pilot, lambda: approval_shown(app) and app._pending.call.name == "str_replace",
                    what="the edit approval")
        # ask mode shows the proposed edit as a diff before it runs
        preview = app.conversation.tools["c2"].query(DiffView)
        assert preview and "+    return a + b" in preview.first().diff
        assert chat_repo.joinpath("calc.py").read_text().endswith("a - b\n")
        await pilot.press("a")  # always allow str_replace from now on
        await until(pilot, lambda: approval_shown(app) and app._pending.call.call_id == "c3", what="rerun approval")
        await pilot.press("y")
        await until(pilot, lambda: turn_settled(app) and app.query(AnswerBlock), what="the answer")
        assert "str_replace" in app.controller.policy.always_allowed
        assert chat_repo.joinpath("calc.py").read_text().endswith("a + b\n")
        blocks = app.conversation.tools
        assert blocks["c1"].state == "error" and blocks["c3"].state == "ok"  # failing test, then passing
        assert "+    return a + b" in blocks["c2"].query_one(DiffView).diff
        assert "Fixed: add now adds." in screen_text(app)

        await pilot.press(*"/diff", "enter")
        await until(pilot, lambda: any("diff --git" in d.diff for d in app.query(DiffView)), what="/diff")
        await pilot.press(*"/undo", "enter")
        await until(pilot, lambda: "restored the workspace to before turn 1" in screen_text(app), what="/undo")
        assert chat_repo.joinpath("calc.py").read_text().endswith("a - b\n")

    records = SessionStore(app.store.root).open().records()
    assert isinstance(records[0], UserTurn) and records[0].text == "fix the add function"
    assert any(isinstance(r, ToolOutput) and r.call_id == "c2" for r in records)


async def test_undo_reverts_whole_turns_including_what_commands_changed(make_app, chat_repo):
    steps = [
        {"tool_calls": [call("u1", "bash", command="echo one > notes.txt && echo '# tweak' >> calc.py")]},
        {"content": "turn one done"},
        {"tool_calls": [call("u2", "bash", command="echo two >> notes.txt && rm test_calc.py && mkdir -p out && echo x > out/y")]},
        {"tool_calls": [call("u3", "str_replace", path="calc.py", old_str="a - b", new_str="a * b")]},
        {"content": "turn two done"},
        {"content": "noted"},
    ]
    app = make_app(steps)
    app.controller.policy.mode = "auto"
    original_calc = chat_repo.joinpath("calc.py").read_text()
    async with app.run_test(size=(100, 30)) as pilot:
        for text, answer in (("first", "turn one done"), ("second", "turn two done")):
            await pilot.press(*text, "enter")
            await until(pilot, lambda: not app.controller.busy and answer in screen_text(app), what=answer)
        assert not chat_repo.joinpath("test_calc.py").exists() and chat_repo.joinpath("out/y").exists()
        await pilot.press(*"/undo", "enter")
        await until(pilot, lambda: "restored the workspace to before turn 2" in screen_text(app), what="/undo 1")
        # Turn two's command and edit are both gone; turn one's changes stay.
        assert chat_repo.joinpath("notes.txt").read_text() == "one\n"
        assert chat_repo.joinpath("test_calc.py").exists() and not chat_repo.joinpath("out").exists()
        assert chat_repo.joinpath("calc.py").read_text() == original_calc + "# tweak\n"
        await pilot.press(*"/undo", "enter")
        await until(pilot, lambda: "restored the workspace to before turn 1" in screen_text(app), what="/undo 2")
        assert not chat_repo.joinpath("notes.txt").exists()
        assert chat_repo.joinpath("calc.py").read_text() == original_calc
        await pilot.press(*"/undo", "enter")
        await until(pilot, lambda: "nothing to undo" in screen_text(app), what="/undo 3")
        # The model hears about the undo with the next message.
        await pilot.press(*"carry on", "enter")
        await until(pilot, lambda: not app.controller.busy and "noted" in screen_text(app), what="turn three")
        last_user = [m for m in app.controller.agent.messages if m.role == "user"][-1].content
        assert "/undo" in last_user and "before turn 1" in last_user and last_user.endswith("carry on")
    # The user's repository itself (index, HEAD) was never written.
    import subprocess
    status = subprocess.run(["git", "-C", str(chat_repo), "status", "--porcelain"], capture_output=True, text=True)
    assert status.stdout == ""


async def test_files_the_agent_creates_belong_to_the_checkouts_owner(make_app, chat_repo):
    """The agent is root in the sandbox; what it creates in the mounted checkout is given back to
    the checkout's owner after each turn (a uid other than root's when the tests run as root)."""
    import os

    if os.geteuid() == 0:
        for path in [chat_repo, *chat_repo.rglob("*")]:
            os.lchown(path, 1234, 1234)
    want = (os.stat(chat_repo).st_uid, os.stat(chat_repo).st_gid)
    steps = [
        {"tool_calls": [call("o1", "bash", command="mkdir -p gen/deep && echo x > gen/deep/f.txt && ln -s calc.py link.py "
                                                  "&& echo '# more' >> calc.py && git add -A && git commit -qm agent")]},
        {"content": "made files"},
    ]
    app = make_app(steps)
    app.controller.policy.mode = "auto"
    async with app.run_test(size=(100, 30)) as pilot:
        await pilot.press(*"make files", "enter")
        await until(pilot, lambda: not app.controller.busy and "made files" in screen_text(app), what="the turn")
    made = [chat_repo / "gen", chat_repo / "gen/deep/f.txt", chat_repo / "link.py", chat_repo / "calc.py"]
    made += list((chat_repo / ".git" / "objects").rglob("*"))
    assert {p.name: (os.lstat(p).st_uid, os.lstat(p).st_gid) for p in made} == {p.name: want for p in made}


async def test_denial_with_a_reason_goes_back_to_the_model(make_app, chat_repo):
    steps = [
        {"tool_calls": [call("d1", "bash", command="rm -rf /workspace/*")]},
        {"content": "Understood, I will not delete anything."},
    ]
    app = make_app(steps)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.press(*"clean up", "enter")
        await until(pilot, lambda: approval_shown(app), what="approval")
        await pilot.press(*"do not delete files", "enter")
        await until(pilot, lambda: turn_settled(app), what="turn end")
        assert app.conversation.tools["d1"].state == "denied"
        tool_messages = [m for m in app.controller.agent.messages if m.role == "tool"]
        assert tool_messages[0].content == "denied: the user declined and said: do not delete files"
        assert chat_repo.joinpath("calc.py").exists()


async def test_interrupt_stops_a_running_command_and_ctrl_c_twice_exits(make_app):
    steps = [{"tool_calls": [call("s1", "bash", command="sleep 300")]}, {"content": "never"}]
    app = make_app(steps)
    async with app.run_test(size=(80, 24)) as pilot:
        app.set_mode("auto")
        await pilot.press(*"wait a while", "enter")
        await until(pilot, lambda: "s1" in app.conversation.tools and app.conversation.tools["s1"].state == "running",
                    what="the command to start")
        await pilot.pause(0.5)
        await pilot.press("escape")
        await until(pilot, lambda: turn_settled(app), timeout=15, what="the interrupt")
        finish = [r for r in app.controller.session.records() if isinstance(r, FinishEvent)]
        assert finish[-1].reason == "interrupted"
        assert "stopped: interrupted" in screen_text(app)
        # the sandbox shell is usable again after the interrupt
        assert app.controller.sandbox.exec("echo alive").output.strip() == "alive"
        await pilot.press("ctrl+c")
        assert app.is_running
        await pilot.press("ctrl+c")
        await pilot.pause(0.2)
    assert app.return_code in (0, None)


async def test_escape_while_an_approval_waits_interrupts_the_turn(make_app, chat_repo):
    steps = [{"tool_calls": [call("e1", "create", path="new.txt", file_text="hello\n")]}, {"content": "never"}]
    app = make_app(steps)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.press(*"make a file", "enter")
        await until(pilot, lambda: approval_shown(app), what="approval")
        assert "+hello" in app.conversation.tools["e1"].query_one(DiffView).diff
        await pilot.press("escape")
        await until(pilot, lambda: turn_settled(app), what="the interrupt")
        assert not app.query_one("#approval").display
        finish = [r for r in app.controller.session.records() if isinstance(r, FinishEvent)]
        assert finish[-1].reason == "interrupted" and not (chat_repo / "new.txt").exists()


async def test_resume_restores_view_and_conversation(make_app, sessions_dir):
    first = make_app([{"content": "Hello! The repository has `calc.py`."}])
    async with first.run_test(size=(80, 24)) as pilot:
        first.set_mode("auto")
        await pilot.press(*"what is here?", "enter")
        await until(pilot, lambda: not first.controller.busy and first.query(AnswerBlock), what="answer")
    session_id = first.controller.session.id

    second = make_app([{"content": "It adds two numbers (after the fix)."}], resume_id=session_id)
    async with second.run_test(size=(80, 24)) as pilot:
        await pilot.pause(0.2)
        assert second.controller.session.id == session_id
        assert "what is here?" in screen_text(second) and "The repository has calc.py." in screen_text(second)
        roles = [m.role for m in second.controller.agent.messages]
        assert roles == ["system", "user", "assistant"]
        await pilot.press(*"and calc.py?", "enter")
        await until(pilot, lambda: not second.controller.busy and len(second.query(AnswerBlock)) == 2, what="answer")
        assert [m.role for m in second.controller.agent.messages][-2:] == ["user", "assistant"]
    assert second.controller.session.records()[-1].type == "finish"


async def test_slash_commands_and_completion(make_app):
    app = make_app([])
    async with app.run_test(size=(80, 24)) as pilot:
        prompt = app.query_one("#prompt")
        await pilot.press(*"/eff", "tab")
        assert prompt.value == "/effort "
        await pilot.press(*"high", "enter")
        assert app.controller.config.reasoning_effort == "high" and app.stats.effort == "high"
        # `none` is the no-thinking level, not the model default (which is max thinking).
        await pilot.press(*"/effort none", "enter")
        assert app.controller.config.reasoning_effort == "none" and app.stats.effort == "none"
        await pilot.press(*"/effort xhigh", "enter")
        assert app.controller.config.reasoning_effort == "max" and app.stats.effort == "max"
        await pilot.press(*"/effort default", "enter")
        assert app.controller.config.reasoning_effort is None and app.stats.effort == "default"
        await pilot.press(*"/effort bogus", "enter")
        await pilot.pause(0.1)
        assert "/effort takes one of" in screen_text(app)
        await pilot.press(*"look at @cal", "tab")
        assert prompt.value == "look at @calc.py"
        prompt.value = ""
        await pilot.press("shift+tab")
        assert app.controller.policy.mode == "auto-edit" and "auto-edit" in screen_text(app)
        await pilot.press(*"/tools", "enter")
        await pilot.pause(0.2)
        tools_text = str(app.query(".notice").last().render())
        assert "find_symbol" in tools_text and "str_replace" in tools_text and "never asks" in tools_text
        await pilot.press(*"/model replay:/nonexistent.jsonl", "enter")
        await pilot.pause(0.2)
        assert "cannot use model" in screen_text(app)
        await pilot.press(*"/bogus", "enter")
        await pilot.pause(0.1)
        assert "unknown command /bogus" in screen_text(app)
        await pilot.press(*"/clear", "enter")
        await pilot.pause(0.1)
        assert len(app.store.list()) == 2
        await pilot.press(*"/exit", "enter")
        await pilot.pause(0.2)
    assert not app.is_running


async def test_compact_sessions_and_resume_commands(make_app, recorded_session):
    # The script's one line answers the summary request that /compact makes.
    app = make_app([{"purpose": "summary", "content": "Summary: the add function was fixed and its test passes."}],
                   resume_id=recorded_session)
    async with app.run_test(size=(100, 30)) as pilot:
        await pilot.pause(0.2)
        before = list(app.controller.agent.messages)
        await pilot.press(*"/compact", "enter")
        await until(pilot, lambda: "context compacted (summarize)" in screen_text(app), what="/compact")
        after = app.controller.agent.messages
        assert after[:3] == before[:3] and after[-1] == before[-1]  # stable prefix and recent turn kept
        assert len(after) < len(before) and any("summary" in (m.content or "").lower() for m in after)
        # The summary request's tokens are recorded like any model call's (status line, session).
        assert any(getattr(r, "purpose", None) == "compaction" for r in app.controller.session.records())
        await pilot.press(*"/clear", "enter")
        await pilot.press(*"/sessions", "enter")
        await pilot.pause(0.3)
        assert "session-fix" in screen_text(app) and "fix the add function" in screen_text(app)
        await pilot.press(*"/resume session-f", "enter")
        await until(pilot, lambda: app.controller.session.id == "session-fix", what="/resume")
        # the compaction was saved in the session, so resuming restores the compacted conversation
        assert [m.model_dump() for m in app.controller.agent.messages] == [m.model_dump() for m in after]
        await pilot.press(*"/resume nope", "enter")
        await pilot.pause(0.2)
        assert "no session matching 'nope'" in screen_text(app)


async def test_quit_while_a_command_runs_does_not_mount_into_a_closing_app(make_app):
    # Ctrl+Q interrupts the command and waits for the worker, whose last events (the failed, exit-130
    # tool output, the finish, the turn end) are still queued when exit() runs; handling them must
    # not mount into the closing app (MountError: can't mount before ToolBlock(classes='failed tool')).
    steps = [{"tool_calls": [call("q1", "bash", command="sleep 300")]}, {"content": "never"}]
    app = make_app(steps)
    async with app.run_test(size=(80, 24)) as pilot:
        app.set_mode("auto")
        await pilot.press(*"wait a while", "enter")
        await until(pilot, lambda: "q1" in app.conversation.tools and app.conversation.tools["q1"].state == "running",
                    what="the command to start")
        await pilot.press("ctrl+q")
        await pilot.pause(0.2)
    assert app.return_code in (0, None)
    outputs = [r for r in app.controller.session.records() if isinstance(r, ToolOutput)]
    last = outputs[-1]  # saved, though not shown; killed (exit 130) or stopped before it started
    assert last.call_id == "q1" and (last.is_error or last.exit_code not in (None, 0)) and last.output.strip()


async def test_switching_models_closes_the_old_backend(make_app, tiny_checkpoint):
    """An embedded model holds its weights, KV cache and engine thread until closed: /model must close it."""
    from agent.backends import make_backend

    app = make_app([])
    async with app.run_test(size=(100, 30)) as pilot:
        old = make_backend(f"embedded:{tiny_checkpoint}", app.controller.config)
        old.engine.start()
        app.controller.set_backend(old)
        await pilot.press(*f"/model embedded:{tiny_checkpoint}", "enter")
        await until(pilot, lambda: app.controller.backend is not old, what="the model switch")
        assert old.engine._thread is None  # shut down
        await pilot.press(*"/exit", "enter")
        await pilot.pause(0.2)
    app.controller.backend.close()
