"""The event loop a :class:`~sandrail.testing.World` runs concurrent calls
on: one kept for the main thread of the process, each run as
``asyncio.run``'s.

Its own module because it is about the process, not about any world: every
world of a campaign shares the one loop.
"""

from __future__ import annotations

import asyncio
import contextvars
import os
import threading
import weakref
from collections.abc import Coroutine
from typing import Any, TypeVar

__all__ = ["_run"]


_T = TypeVar("_T")
_RUNNER: dict[str, tuple[int, asyncio.Runner]] = {}


def _run(coroutine: Coroutine[Any, Any, _T]) -> _T:
    """``asyncio.run(coroutine)``, on one event loop kept for the main thread
    of this process (a campaign makes thousands of concurrent calls, and a
    new loop costs about a millisecond each); any other thread, and a call
    from inside a running loop, gets exactly ``asyncio.run``. As there, the
    coroutine runs in a copy of the caller's context, and the tasks it leaves
    behind are cancelled before this returns."""
    if threading.current_thread() is not threading.main_thread():
        return asyncio.run(coroutine)
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        pass
    else:
        return asyncio.run(coroutine)  # raises, as it does there
    kept = _RUNNER.get("main")
    if kept is None or kept[0] != os.getpid():  # a fork must not share its parent's loop
        runner = asyncio.Runner()
        weakref.finalize(runner, runner.close)
        kept = _RUNNER["main"] = (os.getpid(), runner)
    runner = kept[1]
    try:
        return runner.run(coroutine, context=contextvars.copy_context())
    finally:
        _cancel_left(runner.get_loop())


def _cancel_left(loop: asyncio.AbstractEventLoop) -> None:
    """Cancel the tasks a run left on ``loop`` and let them finish (as
    ``asyncio.run`` does when it closes its loop)."""
    left = asyncio.all_tasks(loop)
    if not left:
        return
    for task in left:
        task.cancel()
    loop.run_until_complete(asyncio.gather(*left, return_exceptions=True))
