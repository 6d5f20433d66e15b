"""`horizon serve --overlap-schedule` on a CPU: the real process steps with the overlap scheduler
(forward on a worker thread), says so in its banner, answers with the scripted greedy reply and
shuts down cleanly."""

from __future__ import annotations

from .conftest import SCRIPTED_REPLY, serve_and_complete


def test_horizon_serve_with_overlap_scheduling(scripted_checkpoint):
    banner, text = serve_and_complete(scripted_checkpoint, "--overlap-schedule")
    assert "; overlap schedule (forward on a worker thread)" in banner, banner
    assert text == SCRIPTED_REPLY
