"""Helpers shared by the local-e2b tests: exception chains and bounded waits."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable

__all__ = ["chain", "gone", "wait_until"]


def chain(exc: BaseException | None) -> list[type[BaseException]]:
    """The exception and its causes, outermost first (``__cause__`` links,
    or an unsuppressed ``__context__``)."""
    found: list[type[BaseException]] = []
    while exc is not None:
        found.append(type(exc))
        exc = exc.__cause__ or (None if exc.__suppress_context__ else exc.__context__)
    return found


def wait_until(condition: Callable[[], bool], timeout: float = 30.0) -> bool:
    """Poll ``condition`` every 20 ms for at most ``timeout`` seconds (a
    bound for a loaded machine: it returns as soon as the condition holds)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.02)
    return condition()


def gone(pid: int) -> bool:
    """Whether no live process has ``pid`` (a zombie counts as gone)."""
    try:
        with open(f"/proc/{pid}/stat", encoding="utf-8") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] == "Z"
    except FileNotFoundError:
        return True
    except OSError:
        return not os.path.exists(f"/proc/{pid}")


def signals_at_default() -> None:
    """A child's ``preexec_fn``: SIGINT, SIGTERM and SIGHUP at their
    default. A test run started in the background of a shell (``cmd &``)
    ignores SIGINT, children inherit that, and the command line keeps an
    inherited ignore (as ``nohup`` asks): a test that signals a child it
    started must not depend on how its own run was started."""
    for number in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(number, signal.SIG_DFL)
