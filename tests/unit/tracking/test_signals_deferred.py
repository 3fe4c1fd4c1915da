"""A signal inside ``signals_deferred`` acts when the block is over (a child run is never
cut between being created and being ended); a second signal acts at once."""

import os
import signal

import pytest

from pipi.tracking import runs


@pytest.fixture()
def pipi_handlers():
    saved = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    runs._stopping = False
    runs.install_signal_handlers()
    yield
    runs._stopping, runs._pending, runs._deferring = False, None, 0
    for s, h in saved.items():
        signal.signal(s, h)


def test_sigterm_inside_waits_for_the_end_of_the_block(pipi_handlers):
    done = []
    with pytest.raises(runs.Terminated):
        with runs.signals_deferred():
            signal.raise_signal(signal.SIGTERM)
            done.append("created")
            done.append("ended")
    assert done == ["created", "ended"]


def test_a_second_signal_inside_acts_at_once(pipi_handlers):
    done = []
    with pytest.raises(KeyboardInterrupt):
        with runs.signals_deferred():
            signal.raise_signal(signal.SIGTERM)
            done.append("first")
            signal.raise_signal(signal.SIGINT)
            done.append("never")
    assert done == ["first"]


def test_no_signal_no_exception(pipi_handlers):
    with runs.signals_deferred():
        pass
    assert runs._pending is None and not runs._stopping
