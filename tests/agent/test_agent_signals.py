"""`agent.cli.signals.on_termination`: SIGTERM/SIGHUP behave like Ctrl-C (real signals to this process)."""

from __future__ import annotations

import os
import signal

import pytest

from agent.cli.signals import on_termination


@pytest.fixture(autouse=True)
def default_hangup():
    """The suite may run under nohup (SIGHUP ignored, which on_termination honours); start from the default."""
    previous = signal.signal(signal.SIGHUP, signal.SIG_DFL)
    yield
    signal.signal(signal.SIGHUP, previous)


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGHUP])
def test_without_a_stop_callback_the_signal_unwinds_like_ctrl_c(signum):
    unwound = []
    with pytest.raises(KeyboardInterrupt):
        with on_termination():
            try:
                os.kill(os.getpid(), signum)
            finally:
                unwound.append(True)
    assert unwound == [True]
    assert signal.getsignal(signum) == signal.SIG_DFL  # restored on the way out


def test_the_first_signal_stops_gracefully_and_the_second_aborts():
    stops = []
    with pytest.raises(KeyboardInterrupt):
        with on_termination():
            with on_termination(lambda: stops.append("stop"), include_sigint=True):
                os.kill(os.getpid(), signal.SIGTERM)
                assert stops == ["stop"]
                os.kill(os.getpid(), signal.SIGHUP)  # now the outer handler: abort
    assert stops == ["stop"] and signal.getsignal(signal.SIGINT) is signal.default_int_handler


def test_an_ignored_hangup_stays_ignored():
    previous = signal.signal(signal.SIGHUP, signal.SIG_IGN)
    try:
        with on_termination():
            os.kill(os.getpid(), signal.SIGHUP)  # as under nohup: nothing happens
            assert signal.getsignal(signal.SIGHUP) == signal.SIG_IGN
    finally:
        signal.signal(signal.SIGHUP, previous)
