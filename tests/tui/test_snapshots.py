"""Snapshots of the main screens (SVG files under __snapshots__/, regenerate with --snapshot-update).

Determinism: fixed terminal sizes, a fixed clock, and conversations restored from a recorded session
(tests/tui/fixtures/session-fix, made by a real run: Docker tools, replay model), so token counts and
tool outputs are the recorded ones, not whatever the agent's prompts produce today.
"""

from __future__ import annotations

import pytest

pytestmark = [pytest.mark.docker]


async def settle(pilot) -> None:
    pilot.app.query_one("#prompt").cursor_blink = False  # a blinking cursor would flip between runs
    await pilot.pause(0.3)
    await pilot.wait_for_scheduled_animations()


def test_start_screen(snap_compare, make_app):
    assert snap_compare(make_app([]), terminal_size=(80, 24), run_before=settle)


def test_help(snap_compare, make_app):
    async def run_before(pilot):
        await pilot.press(*"/help", "enter")
        await settle(pilot)

    assert snap_compare(make_app([]), terminal_size=(80, 24), run_before=run_before)


def test_resumed_conversation_80x24(snap_compare, make_app, recorded_session):
    app = make_app([], resume_id=recorded_session)
    assert snap_compare(app, terminal_size=(80, 24), run_before=settle)


def test_resumed_conversation_scrolled_to_the_edit(snap_compare, make_app, recorded_session):
    async def run_before(pilot):
        await settle(pilot)
        pilot.app.conversation.scroll_to_widget(pilot.app.conversation.tools["c2"], animate=False, top=True)
        await settle(pilot)

    app = make_app([], resume_id=recorded_session)
    assert snap_compare(app, terminal_size=(80, 24), run_before=run_before)


def test_light_theme_wide(snap_compare, make_app, recorded_session):
    async def run_before(pilot):
        pilot.app.theme = "textual-light"
        await settle(pilot)
        pilot.app.conversation.scroll_home(animate=False)
        await settle(pilot)

    app = make_app([], resume_id=recorded_session)
    assert snap_compare(app, terminal_size=(120, 36), run_before=run_before)


def test_small_terminal_and_resize_do_not_crash(snap_compare, make_app, recorded_session):
    async def run_before(pilot):
        for size in ((40, 12), (200, 60), (80, 24), (20, 6), (60, 20)):
            await pilot.resize_terminal(*size)
            await pilot.pause(0.05)
        await settle(pilot)

    app = make_app([], resume_id=recorded_session)
    assert snap_compare(app, terminal_size=(60, 20), run_before=run_before)
