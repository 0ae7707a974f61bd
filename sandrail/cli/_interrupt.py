"""SIGINT, SIGTERM and SIGHUP as the abort of the call in flight (SIGHUP
is the terminal closing).

A command-line call is a harness whose user may press Ctrl-C (or whose
supervisor may send SIGTERM, or whose terminal may close) at any moment.
Python's default turns SIGINT into a ``KeyboardInterrupt`` raised wherever
the main thread is, which the port lets through (the process is being stopped) and click prints as
``Aborted!`` with exit status 1, which says "nothing ran" even when the
command was launched and goes on running. Here the signal is the call's
abort instead (C11): the port answers ``canceled`` (``error``, nothing ran)
before any side effect may have left, and ``uncertain`` with the full
locator after (C6), which the command line prints like any result.
SIGTERM and SIGHUP would otherwise end the process at once, silently.

The console script notes these signals from its first line
(:mod:`_sandrail_start`); one noted before the call began aborts it here
at once. A signal the process inherited as ignored (``nohup``) stays
ignored.

Strategy: a signal handler runs in the main thread between two bytecodes,
possibly while that thread holds the cancel token's lock (registering a
waiter), so firing the token there could deadlock or lose a waiter. The
handler only writes one byte to a pipe (async-signal-safe, no lock); a
watcher thread reads it and fires the token, which wakes any wait at once.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
from collections.abc import Iterator
from typing import Final

from _sandrail_start import EARLY, NOTED_SIGNALS
from sandrail.interpreters._cancel import CancelToken

__all__ = ["SIGNALS", "cancelled_by_signals"]

SIGNALS: Final = NOTED_SIGNALS
"""The signals that abort a command-line call: SIGINT, SIGTERM, SIGHUP."""

_FIRE: Final = b"f"
_STOP: Final = b"s"


@contextlib.contextmanager
def cancelled_by_signals() -> Iterator[CancelToken]:
    """A cancel token that :data:`SIGNALS` fire while the block runs.

    The handlers that were there before are put back when the block ends,
    whatever ends it. A signal the console script noted before the block
    fires the token at once. A signal whose handler is ``SIG_IGN`` stays
    ignored. Outside the main thread (where Python allows no handlers) the
    token is only a token: nothing fires it.
    """
    token = CancelToken()
    if threading.current_thread() is not threading.main_thread():
        yield token
        return
    read_end, write_end = os.pipe()
    os.set_blocking(write_end, False)

    def watch() -> None:
        while True:
            byte = os.read(read_end, 1)
            if byte != _FIRE:
                return  # _STOP, or the pipe closed
            token.cancel()

    def handle(signum: int, frame: object) -> None:
        # A full pipe already holds a byte that fires the token.
        with contextlib.suppress(OSError):
            os.write(write_end, _FIRE)

    watcher = threading.Thread(target=watch, name="sandrail-signals", daemon=True)
    watcher.start()
    previous = {
        signum: signal.signal(signum, handle)
        for signum in SIGNALS
        if signal.getsignal(signum) is not signal.SIG_IGN
    }
    if EARLY.take():
        token.cancel()
    try:
        yield token
    finally:
        for signum, handler in previous.items():
            # None: a handler set outside Python; the default is the best guess.
            signal.signal(signum, signal.SIG_DFL if handler is None else handler)
        # The stop byte may wait behind fire bytes: the watcher reads them all.
        os.set_blocking(write_end, True)
        os.write(write_end, _STOP)
        watcher.join()
        os.close(read_end)
        os.close(write_end)
