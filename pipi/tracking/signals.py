"""Signals: SIGTERM and SIGINT end pipi's open runs KILLED (``Terminated`` is a
``KeyboardInterrupt``), short writes defer them (``signals_deferred``), and the stretch of
real work inside such a write lets them act (``signals_live``)."""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator

__all__ = ["Terminated", "install_signal_handlers", "interrupt_reason", "signals_deferred",
           "signals_end_runs", "signals_live"]


class Terminated(KeyboardInterrupt):
    """SIGTERM (a SLURM time limit or ``scancel``, ``docker stop``, systemd, ``mlflow run``
    cancelling its child): handled like Ctrl-C, so the run ends KILLED with a reason."""


_stopping = False  # a first SIGINT/SIGTERM is being handled: the runs are being ended
_depth = 0  # pipi runs open in this process
_deferring = 0  # inside signals_deferred(): a signal waits until the write is complete
_pending: int | None = None


def _on_signal(signum, frame) -> None:
    global _stopping, _pending
    if _stopping:
        # Already ending the run(s) (e.g. `mlflow run` sends SIGTERM right after Ctrl-C):
        # let that finish instead of dying half-way with the run RUNNING or FAILED.
        return
    if _deferring and _pending is None:
        _pending = signum  # raised when the write is over; a second signal acts at once
        return
    _pending = None
    _stopping = True
    if signum == signal.SIGTERM:
        raise Terminated("SIGTERM")
    raise KeyboardInterrupt


@contextlib.contextmanager
def signals_deferred() -> Iterator[None]:
    """A short write that must not be cut half-way (a child run created, filled and ended):
    a SIGINT/SIGTERM arriving inside is acted on when the block is over, so the run is never
    left RUNNING with nobody to end it. A second signal inside acts at once."""
    global _deferring, _pending
    _deferring += 1
    try:
        yield
    finally:
        _deferring -= 1
        if not _deferring and _pending is not None:
            signum = _pending
            if signal.getsignal(signum) is _on_signal:
                _on_signal(signum, None)
            else:
                _pending = None


@contextlib.contextmanager
def signals_live() -> Iterator[None]:
    """Inside ``signals_deferred()``: the stretch where a signal may act at once (the work
    itself, not the bookkeeping around it). A signal that was waiting acts on entry."""
    global _deferring
    saved, _deferring = _deferring, 0
    try:
        if _pending is not None and signal.getsignal(_pending) is _on_signal:
            _on_signal(_pending, None)
        yield
    finally:
        _deferring = saved


def install_signal_handlers() -> None:
    """SIGTERM and SIGINT end the active run(s) KILLED (main thread only; a signal that the
    parent set to be ignored, e.g. SIGINT of a background job, stays ignored)."""
    if threading.current_thread() is not threading.main_thread():
        return
    for sig in (signal.SIGINT, signal.SIGTERM):
        current = signal.getsignal(sig)
        if current is not _on_signal and current is not signal.SIG_IGN:
            signal.signal(sig, _on_signal)


@contextlib.contextmanager
def signals_end_runs() -> Iterator[None]:
    """While pipi runs are open, SIGTERM and SIGINT end them KILLED; the handlers a library
    caller had (e.g. a notebook's) are back once the outermost run is over."""
    global _depth, _stopping
    saved = None
    if _depth == 0 and threading.current_thread() is threading.main_thread():
        saved = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
        install_signal_handlers()
    _depth += 1
    try:
        yield
    finally:
        _depth -= 1
        if _depth == 0 and saved and _on_signal not in saved.values():
            # a library caller's own handlers (the CLI keeps pipi's until the process exits,
            # so a late SIGTERM from `mlflow run` cannot interrupt its last line)
            _stopping = False
            for sig, handler in saved.items():
                if handler is not None:
                    signal.signal(sig, handler)


def interrupt_reason(exc: BaseException) -> str:
    """What stopped a run, in words (the ``pipi.failure_reason`` of a KILLED run)."""
    if isinstance(exc, Terminated):
        return "terminated by SIGTERM (a time limit, scancel, docker stop, systemd or kill)"
    return "interrupted by SIGINT (Ctrl-C)"
