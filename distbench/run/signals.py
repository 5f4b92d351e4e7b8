"""Termination signals: SIGINT, SIGTERM and SIGHUP all stop a distbench command the same way.

The first one raises `Interrupted` (a KeyboardInterrupt, so every handler that copes with Ctrl-C
runs): the point and the sweep are recorded 'interrupted' and the CLI says how to resume and exits
128 + the signal number. Further signals during that cleanup are ignored, so a second Ctrl-C or a
`scancel` repeat cannot cut it short (SIGKILL can: then the rank guards stop the workers).
"""

from __future__ import annotations

import signal
import sys
from contextlib import contextmanager

HANDLED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
_received: list[int] = []
"""The termination signal a command received (while `handled` is on), kept for `check`."""


class Interrupted(KeyboardInterrupt):
    """Raised in the main thread by the first termination signal."""

    def __init__(self, signum: int):
        super().__init__(signal.Signals(signum).name)
        self.signum = signum
        self.sweep: tuple | None = None
        """(sweep id, store path, command line, the sweep's RecordKind or None) of the sweep it interrupted,
        set by the sweep."""

    @property
    def name(self) -> str:
        return signal.Signals(self.signum).name


def signal_of(exc: BaseException | None) -> int:
    """The signal behind an interruption (SIGINT when no Interrupted is behind it)."""
    exc = interruption(exc)
    return exc.signum if exc is not None else signal.SIGINT


def interruption(exc: BaseException | None) -> Interrupted | None:
    """The Interrupted behind `exc` (click wraps Ctrl-C in Abort: look at the causes)."""
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
        _received.append(signum)
        raise Interrupted(signum)

    previous = {}
    for sig in HANDLED:
        try:
            previous[sig] = signal.signal(sig, handler)
        except ValueError:  # not the main thread (e.g. a library caller): leave signals alone
            break
    default_hook = sys.unraisablehook

    def unraisable(info):
        """An Interrupted raised where Python cannot propagate it (a finalizer, an at-fork hook such as
        logging's, run when a subprocess is forked) is kept for `check`, not printed as a traceback."""
        if not isinstance(info.exc_value, Interrupted):
            default_hook(info)

    if previous:
        sys.unraisablehook = unraisable
    try:
        yield
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)
        if previous:
            sys.unraisablehook = default_hook
        _received.clear()


def check() -> None:
    """Raise the Interrupted of a termination signal this command already received. Python runs a signal
    handler at whatever line is executing, and an exception raised inside a finalizer (a __del__, a weakref
    callback) or an at-fork hook (logging registers one; Popen runs it) is ignored, not propagated: the
    sweep would then run on to the end. Called where work starts or waits (each point, each launch, each poll
    of a running launcher); once the Interrupted has propagated, nothing calls it."""
    if _received:
        raise Interrupted(_received[0])


@contextmanager
def deferred():
    """Hold termination signals back while a point is committed (they raise right after): a point is
    stored whole or not at all."""
    old = signal.pthread_sigmask(signal.SIG_BLOCK, HANDLED)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)
