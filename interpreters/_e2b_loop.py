"""One event loop, on a thread of its own, for every SDK call of a backend.

Strategy: the e2b SDK is asynchronous and the backend keeps state (known
sandboxes, locks per session, the epochs of sent starts). A port may be
driven from many threads, each with its own event loop (``execute_sync``
runs one per call), or from many tasks of one loop. So the backend's state
is confined to one loop that it owns: every call is submitted to that loop
and its caller awaits a bridged future. Per-session ``asyncio`` locks then
coordinate every caller, whatever thread or loop it runs on, and no state needs a thread lock.

A caller cancelled while waiting cancels the work on the owned loop too. Work
cancelled by the loop's side (the backend was closed) reaches the caller as
:class:`LoopClosedError`, never as a ``CancelledError`` the caller did not ask
for.

A cancelled SDK call can leave a task behind that ends with an error nobody
retrieves: the SDK waits for a stream's first event under ``wait_for``, and
when that wait is cancelled the stream turns the ``CancelledError`` into
``ConnectError("Request was cancelled")`` inside the inner task, which
``wait_for`` cancels but never reads. asyncio then prints "Task exception
was never retrieved" and a traceback on standard error, for a cancellation
this backend made itself. The loop is the backend's own,
so its exception handler is too: an error that only stands for a
cancellation (a ``CancelledError`` in its cause chain) is no error; nor is
one that only stands for a stream closed under it (a ``GeneratorExit`` in
its chain: the loop's shutdown closing an SDK stream generator, whose
transport then raises ``ConnectError("generator didn't stop after
athrow()")``, as a signal's exit showed); anything else is reported as
asyncio reports it.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import threading
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

__all__ = ["LoopClosedError", "LoopThread"]

T = TypeVar("T")


class LoopClosedError(RuntimeError):
    """The loop was closed before (or while) the work ran."""


class LoopThread:
    """An event loop running on a daemon thread, started on first use."""

    def __init__(self, name: str) -> None:
        self._name = name
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._closed = False

    @property
    def closed(self) -> bool:
        return self._closed

    def _running_loop(self) -> asyncio.AbstractEventLoop:
        with self._lock:
            if self._closed:
                raise LoopClosedError("closed")
            if self._loop is None:
                loop = asyncio.new_event_loop()
                loop.set_exception_handler(_quiet_cancellations)
                started = threading.Event()

                def run() -> None:
                    asyncio.set_event_loop(loop)
                    loop.call_soon(started.set)
                    loop.run_forever()

                thread = threading.Thread(target=run, name=self._name, daemon=True)
                thread.start()
                started.wait()
                self._loop, self._thread = loop, thread
            return self._loop

    def on_loop(self) -> bool:
        """Whether the calling code runs on this loop's thread."""
        return self._thread is not None and threading.current_thread() is self._thread

    def submit(self, work: Callable[[], Coroutine[Any, Any, T]]) -> concurrent.futures.Future[T]:
        """Run ``work()`` on the loop; raises :class:`LoopClosedError` if closed."""
        loop = self._running_loop()
        return asyncio.run_coroutine_threadsafe(_call(work), loop)

    async def run(self, work: Callable[[], Coroutine[Any, Any, T]]) -> T:
        """Await ``work()`` run on the loop, from any thread or event loop."""
        if self.on_loop():
            return await work()
        future = asyncio.wrap_future(self.submit(work))
        try:
            return await future
        except asyncio.CancelledError:
            task = asyncio.current_task()
            if task is not None and task.cancelling():
                raise  # our caller was cancelled: let it be
            raise LoopClosedError("the work was cancelled by the loop's owner") from None

    def call(self, work: Callable[[], Coroutine[Any, Any, T]], timeout: float | None = None) -> T:
        """Block the calling thread (not the loop's) until ``work()`` ran."""
        try:
            return self.submit(work).result(timeout)
        except concurrent.futures.CancelledError:
            raise LoopClosedError("the work was cancelled by the loop's owner") from None

    def stop(self, timeout: float = 10.0) -> None:
        """Cancel what still runs, stop the loop and join its thread.
        Idempotent; refuses to run on the loop's own thread."""
        if self.on_loop():
            raise RuntimeError("a LoopThread cannot be stopped from its own thread")
        with self._lock:
            self._closed = True
            loop, thread = self._loop, self._thread
            self._loop = self._thread = None
        if loop is None or thread is None:
            return

        async def cancel_rest() -> None:
            me = asyncio.current_task()
            rest = [task for task in asyncio.all_tasks() if task is not me]
            for task in rest:
                task.cancel()
            await asyncio.gather(*rest, return_exceptions=True)
            await loop.shutdown_asyncgens()

        with contextlib.suppress(
            concurrent.futures.TimeoutError, concurrent.futures.CancelledError
        ):
            asyncio.run_coroutine_threadsafe(cancel_rest(), loop).result(timeout)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(timeout)
        if not thread.is_alive():
            loop.close()


async def _call(work: Callable[[], Coroutine[Any, Any, T]]) -> T:
    return await work()


def _quiet_cancellations(loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
    """The owned loop's exception handler (see the module doc): what only
    stands for a cancellation is dropped, the rest reported as by default."""
    if not _from_cancellation(context.get("exception")):
        loop.default_exception_handler(context)


def _from_cancellation(error: object) -> bool:
    """Whether ``error`` is, or was caused by, an ``asyncio.CancelledError``
    or a ``GeneratorExit`` (a generator closed under it)."""
    seen: set[int] = set()
    while isinstance(error, BaseException) and id(error) not in seen:
        if isinstance(error, asyncio.CancelledError | GeneratorExit):
            return True
        seen.add(id(error))
        error = error.__cause__ or error.__context__
    return False
