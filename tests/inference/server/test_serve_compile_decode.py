"""`horizon serve --compile-decode`: the real process compiles its decode step at start-up, says
so in its banner, and answers with the same greedy text as the eager engine (the scripted reply)."""

from __future__ import annotations

from .conftest import SCRIPTED_REPLY, serve_and_complete


def test_horizon_serve_with_a_compiled_decode_step(scripted_checkpoint):
    banner, text = serve_and_complete(scripted_checkpoint, "--compile-decode")
    assert "; decode compiled)" in banner, banner
    assert text == SCRIPTED_REPLY
