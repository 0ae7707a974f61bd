"""The stock abort signal a harness hands to a port with each request, and
the signal that fires when either of two does."""

from __future__ import annotations

import threading
from collections.abc import Callable

__all__ = ["CancelToken", "EitherSignal"]


class CancelToken:
    """A one-way abort signal, safe to fire from any thread.

    ``cancel()`` sets it for good and runs the registered callbacks once
    (a callback registered after the fact runs at once). Ports check it
    before and after every external step (C11), and waits wake on it.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._cancelled = False
        self._callbacks: dict[int, Callable[[], object]] = {}
        self._next = 0

    @property
    def cancelled(self) -> bool:
        """Whether :meth:`cancel` was called."""
        return self._cancelled

    def cancel(self) -> None:
        """Cancel the call: run every registered callback once. Calling it again
        does nothing."""
        with self._lock:
            if self._cancelled:
                return
            self._cancelled = True
            callbacks = list(self._callbacks.values())
            self._callbacks.clear()
        for callback in callbacks:
            callback()

    def add_callback(self, callback: Callable[[], object]) -> Callable[[], None]:
        """Run ``callback`` when the token fires; returns a function that unregisters it."""
        with self._lock:
            if not self._cancelled:
                key = self._next
                self._next += 1
                self._callbacks[key] = callback

                def remove() -> None:
                    with self._lock:
                        self._callbacks.pop(key, None)

                return remove
        callback()
        return lambda: None

    def __repr__(self) -> str:
        return f"CancelToken(cancelled={self._cancelled})"


class EitherSignal:
    """An abort signal that fires when ``first`` (a :class:`CancelToken` of
    sandrail's own: a toolset's, fired when its await is cancelled, or a
    test world's) or ``other`` (the harness's own signal, if any) does.

    ``other`` is the harness's object: reading it may fail, and a signal
    that cannot be read may have fired, so that counts as fired (C11).
    """

    def __init__(self, first: CancelToken, other: object | None) -> None:
        self._first = first
        self._other = other

    @property
    def cancelled(self) -> bool:
        if self._first.cancelled:
            return True
        if self._other is None:
            return False
        try:
            return getattr(self._other, "cancelled", False) is True
        except Exception:
            return True

    def add_callback(self, callback: Callable[[], object]) -> Callable[[], None]:
        """Run ``callback`` when either fires; returns a function that
        unregisters it from both."""
        removers = [self._first.add_callback(callback)]
        add = getattr(self._other, "add_callback", None)
        if callable(add):
            removers.append(add(callback))

        def remove() -> None:
            for remover in removers:
                if callable(remover):
                    remover()

        return remove
