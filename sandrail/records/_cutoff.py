"""A client-side bound on a blocking database operation: past its deadline,
the connection's socket is shut down, so whatever waits on it fails at once.

A server that answers nothing at all (frozen, or behind a partition that
drops packets while the kernels still acknowledge them) ends neither a
server-side statement timeout nor a TCP timeout; a bound the client keeps
itself is the only one that holds.

Strategy: one watchdog thread per process keeps every watched socket with
its deadline and, when one passes, shuts that socket down through a
duplicate of its descriptor (the socket is the driver's). Watching and
releasing take the watchdog's lock, and a cut is made under it, so once
:meth:`Watchdog.release` returned, the descriptor (which may by then belong
to another connection) is never touched. No thread is made per operation.
"""

from __future__ import annotations

import contextlib
import os
import socket
import threading
import time
from collections.abc import Iterator
from typing import Final

__all__ = ["Watchdog", "bounded"]


class _Watch:
    __slots__ = ("cut", "deadline", "fileno")

    def __init__(self, fileno: int, deadline: float) -> None:
        self.fileno = fileno
        self.deadline = deadline
        self.cut = False


class Watchdog:
    """Shuts watched sockets down once their deadline (``time.monotonic``) passes."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._watches: set[_Watch] = set()
        self._wake_at: float | None = None
        self._thread: threading.Thread | None = None

    def watch(self, fileno: int, deadline: float) -> _Watch:
        """Watch ``fileno`` until :meth:`release`, cutting it at ``deadline``."""
        watch = _Watch(fileno, deadline)
        with self._cond:
            self._watches.add(watch)
            if self._thread is None or not self._thread.is_alive():  # first use, or forked
                self._thread = threading.Thread(
                    target=self._run, name="sandrail-record-watchdog", daemon=True
                )
                self._thread.start()
            elif self._wake_at is None or deadline < self._wake_at:
                self._cond.notify()
        return watch

    def release(self, watch: _Watch) -> bool:
        """Stop watching; whether the socket was cut."""
        with self._cond:
            self._watches.discard(watch)
            return watch.cut

    def _run(self) -> None:
        with self._cond:
            while True:
                now = time.monotonic()
                for watch in [w for w in self._watches if w.deadline <= now]:
                    self._watches.discard(watch)
                    watch.cut = True
                    _shut_down(watch.fileno)
                self._wake_at = min((w.deadline for w in self._watches), default=None)
                self._cond.wait(None if self._wake_at is None else self._wake_at - now)


def _shut_down(fileno: int) -> None:
    with contextlib.suppress(OSError), socket.socket(fileno=os.dup(fileno)) as duplicate:
        duplicate.shutdown(socket.SHUT_RDWR)


_WATCHDOG: Final = Watchdog()


@contextlib.contextmanager
def bounded(fileno: int, deadline: float) -> Iterator[_Watch]:
    """Run the block with ``fileno`` cut at ``deadline``; the watch it
    yields says (``cut``) whether it was, once the block ended."""
    watch = _WATCHDOG.watch(fileno, deadline)
    try:
        yield watch
    finally:
        _WATCHDOG.release(watch)
