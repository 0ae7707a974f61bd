"""Spawning children and reaping every child, orphans included.

Strategy: the server process makes itself a child subreaper
(``PR_SET_CHILD_SUBREAPER``), so every process a sandbox command leaves
behind is re-parented to it when its parent dies, and must be reaped here or
linger as a zombie. One :class:`Reaper` is the only code in the server that
waits for children: on each ``SIGCHLD`` it calls ``waitpid(-1, WNOHANG)``
until nothing is left, hands the status of a child it spawned to that
child's future, and drops an orphan's. Because nothing else waits (no
``subprocess``, no asyncio child watcher), no exit status is ever stolen.
Children are started with ``posix_spawn`` (safe in a threaded process, no
``preexec_fn``), each in a new session, so each command is its own process
group.
"""

from __future__ import annotations

import asyncio
import ctypes
import os
import signal
from collections.abc import Mapping, Sequence

import attrs

__all__ = ["Exit", "Reaper", "make_subreaper"]

_PR_SET_CHILD_SUBREAPER = 36


def make_subreaper() -> bool:
    """Make this process a child subreaper; ``False`` if the kernel refused."""
    libc = ctypes.CDLL(None, use_errno=True)
    return int(libc.prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)) == 0


@attrs.frozen
class Exit:
    """How a child ended, in the terms envd reports (Go's ``ProcessState``):
    ``exit_code`` is -1 when a signal killed it; ``status`` reads
    ``"exit status 1"`` or ``"signal: killed"``."""

    exit_code: int
    exited: bool
    signal: int | None

    @property
    def status(self) -> str:
        if self.signal is None:
            return f"exit status {self.exit_code}"
        return f"signal: {_SIGNAL_TEXT.get(self.signal, signal.Signals(self.signal).name)}"

    @classmethod
    def from_wait_status(cls, status: int) -> Exit:
        if os.WIFSIGNALED(status):
            return cls(exit_code=-1, exited=False, signal=os.WTERMSIG(status))
        return cls(exit_code=os.WEXITSTATUS(status), exited=True, signal=None)


# Go's syscall.Signal.String() for the signals a command usually dies of.
_SIGNAL_TEXT: dict[int, str] = {
    signal.SIGKILL: "killed",
    signal.SIGTERM: "terminated",
    signal.SIGINT: "interrupt",
    signal.SIGHUP: "hangup",
    signal.SIGPIPE: "broken pipe",
    signal.SIGSEGV: "segmentation fault",
    signal.SIGABRT: "aborted",
    signal.SIGQUIT: "quit",
}


class Reaper:
    """Spawns children and delivers their exits; reaps orphans.

    Must be created and used on the event loop's thread; :meth:`install`
    hooks ``SIGCHLD`` (the loop must run in the main thread).
    """

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._waiting: dict[int, asyncio.Future[Exit]] = {}
        self.orphans_reaped = 0

    def install(self) -> None:
        """Reap on every ``SIGCHLD`` from now on."""
        self._loop.add_signal_handler(signal.SIGCHLD, self.reap)

    def uninstall(self) -> None:
        self._loop.remove_signal_handler(signal.SIGCHLD)

    def spawn(
        self,
        argv: Sequence[str],
        env: Mapping[str, str],
        *,
        stdin: int,
        stdout: int,
        stderr: int,
    ) -> tuple[int, asyncio.Future[Exit]]:
        """Start ``argv`` in a new session with the given file descriptors as
        its standard streams; returns its pid and a future of its exit.
        Raises ``OSError`` if it could not be started."""
        actions = [
            (os.POSIX_SPAWN_DUP2, stdin, 0),
            (os.POSIX_SPAWN_DUP2, stdout, 1),
            (os.POSIX_SPAWN_DUP2, stderr, 2),
        ]
        pid = os.posix_spawn(
            argv[0],
            list(argv),
            dict(env),
            file_actions=actions,
            setsid=True,
            setsigdef=(signal.SIGPIPE, signal.SIGINT, signal.SIGTERM, signal.SIGCHLD),
            setsigmask=(),
        )
        future: asyncio.Future[Exit] = self._loop.create_future()
        self._waiting[pid] = future
        return pid, future

    def reap(self) -> None:
        """Collect every child that has ended; never blocks."""
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            future = self._waiting.pop(pid, None)
            if future is None:
                self.orphans_reaped += 1
            elif not future.done():
                future.set_result(Exit.from_wait_status(status))
