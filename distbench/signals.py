"""Termination signals: SIGINT, SIGTERM and SIGHUP all stop a distbench command the same way.

The first one raises `Interrupted` (a KeyboardInterrupt, so every `finally` and every handler that
already copes with Ctrl-C runs): the running point's worker tree is terminated (launch.run_point),
the point is recorded 'interrupted', the sweep is marked 'interrupted' with the signal named, and
the CLI prints one line saying how to resume and exits 128 + the signal number. Further signals
while that cleanup runs are noted and ignored, so a second Ctrl-C or a `scancel` repeat cannot cut
the cleanup short (SIGKILL still can: then the rank guards stop the workers).
"""

from __future__ import annotations

import signal
from contextlib import contextmanager

HANDLED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


class Interrupted(KeyboardInterrupt):
    """Raised in the main thread by the first termination signal."""

    def __init__(self, signum: int):
        super().__init__(signal.Signals(signum).name)
        self.signum = signum
        self.sweep: tuple[str, str, str] | None = None
        """(sweep id, store path, command line) of the sweep it interrupted, set by the sweep."""

    @property
    def name(self) -> str:
        return signal.Signals(self.signum).name


def signal_of(exc: BaseException | None) -> int:
    """The signal behind an interruption (click wraps Ctrl-C in Abort: look at the cause)."""
    while exc is not None and not isinstance(exc, Interrupted):
        exc = exc.__cause__ or exc.__context__
    return exc.signum if exc is not None else signal.SIGINT


def interruption(exc: BaseException | None) -> Interrupted | None:
    while exc is not None and not isinstance(exc, Interrupted):
        exc = exc.__cause__ or exc.__context__
    return exc


@contextmanager
def handled():
    """Turn SIGINT/SIGTERM/SIGHUP into Interrupted for the duration of a command."""
    state = {"raised": False}

    def handler(signum, _frame):
        if state["raised"]:
            return
        state["raised"] = True
        raise Interrupted(signum)

    previous = {}
    for sig in HANDLED:
        try:
            previous[sig] = signal.signal(sig, handler)
        except ValueError:  # not the main thread (e.g. a library caller): leave signals alone
            break
    try:
        yield
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)


@contextmanager
def deferred():
    """Hold termination signals back while a point is committed: a signal that arrives meanwhile is
    delivered (and raises) right after, so a point is stored whole or not at all, never half."""
    old = signal.pthread_sigmask(signal.SIG_BLOCK, HANDLED)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)
