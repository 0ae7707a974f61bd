"""The processes of one sandbox, as envd keeps them.

Each process is started by the :class:`Reaper` in its own session (so its
own process group), with pipes for stdout and stderr (and stdin when asked).
Its output is fanned out to every stream watching it (``Start`` and any
``Connect``), from the moment each began watching; nothing is replayed.

Strategy: when the reaper reports the exit, whatever the pipes still hold is
read without blocking and the read ends are closed (as envd's ``cmd.Wait``
does), so a background grandchild that keeps the pipe open cannot hold the
end event back; then every watcher gets the end event and the process leaves
the table (a later ``Connect`` or ``SendSignal`` by its pid is NOT_FOUND).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import time
from collections.abc import Callable, Mapping, Sequence

import attrs

from ._reaper import Exit, Reaper

__all__ = ["Output", "ProcessTable", "RunningProcess", "StdinError"]

_CHUNK = 32 * 1024
_BACKLOG = 256  # chunks (8 MiB) queued for a slow watcher before reading pauses
STDOUT_HEAD_BYTES = 256
"""How much of each process's stdout the ground truth keeps."""


class StdinError(RuntimeError):
    """The process has no open standard input."""


@attrs.frozen
class Output:
    """One chunk of output: ``stream`` is ``"stdout"`` or ``"stderr"``."""

    stream: str
    data: bytes


Event = Output | Exit
"""What a watcher receives: output chunks, then the exit, then nothing."""


class RunningProcess:
    """One started process and the queues of the streams watching it."""

    def __init__(
        self,
        *,
        pid: int,
        user: str,
        cmd: str,
        args: Sequence[str],
        envs: Mapping[str, str],
        cwd: str,
        tag: str | None,
        exit_future: asyncio.Future[Exit],
        stdout: int,
        stderr: int,
        stdin: int | None,
    ) -> None:
        self.pid = pid
        self.user = user
        self.cmd = cmd
        self.args = tuple(args)
        self.envs = dict(envs)
        self.cwd = cwd
        self.tag = tag
        self.started_at = time.time()
        self.exit: Exit | None = None
        self.exit_future = exit_future
        self._fds = {"stdout": stdout, "stderr": stderr}
        self._stdin = stdin
        self._watchers: list[asyncio.Queue[Event]] = []
        self._paused = False
        self.ended = asyncio.Event()
        self.stdout_head = bytearray()
        """The first :data:`STDOUT_HEAD_BYTES` of its stdout (ground truth:
        what a launcher answered, even to a client that never saw it)."""

    def watch(self) -> asyncio.Queue[Event]:
        """A queue receiving this process's events from now on."""
        queue: asyncio.Queue[Event] = asyncio.Queue()
        if self.exit is not None:
            queue.put_nowait(self.exit)
        else:
            self._watchers.append(queue)
        return queue

    def unwatch(self, queue: asyncio.Queue[Event]) -> None:
        with contextlib.suppress(ValueError):
            self._watchers.remove(queue)
        self.drained(queue)

    def _publish(self, event: Event) -> None:
        for queue in self._watchers:
            queue.put_nowait(event)
        backlog = any(queue.qsize() >= _BACKLOG for queue in self._watchers)
        if isinstance(event, Output) and not self._paused and backlog:
            # Strategy: like envd's bounded channels, a slow reader holds the
            # command back (its pipe fills) instead of growing memory.
            self._paused = True
            loop = asyncio.get_running_loop()
            for fd in self._fds.values():
                loop.remove_reader(fd)

    def drained(self, queue: asyncio.Queue[Event]) -> None:
        """A watcher took events: resume reading once every backlog is small."""
        if self._paused and all(q.qsize() < _BACKLOG // 2 for q in self._watchers):
            self._paused = False
            if self.exit is None:
                self.start_reading()

    def _read(self, stream: str) -> bool:
        """Read one chunk from ``stream``; ``False`` at its end."""
        fd = self._fds.get(stream)
        if fd is None:
            return False
        try:
            data = os.read(fd, _CHUNK)
        except BlockingIOError:
            return True
        except OSError:
            data = b""
        if not data:
            self._close(stream)
            return False
        if stream == "stdout" and len(self.stdout_head) < STDOUT_HEAD_BYTES:
            self.stdout_head += data[: STDOUT_HEAD_BYTES - len(self.stdout_head)]
        self._publish(Output(stream, data))
        return True

    def _close(self, stream: str) -> None:
        fd = self._fds.pop(stream, None)
        if fd is not None:
            asyncio.get_running_loop().remove_reader(fd)
            os.close(fd)

    def start_reading(self) -> None:
        loop = asyncio.get_running_loop()
        for stream, fd in list(self._fds.items()):
            os.set_blocking(fd, False)
            loop.add_reader(fd, self._read, stream)

    def finish(self, exit: Exit) -> None:
        """Drain the pipes, close them, publish the exit."""
        for stream in ("stdout", "stderr"):
            for _ in range(4096):  # bounded: a pipe holds little once its writer is gone
                if not self._read(stream):
                    break
            self._close(stream)
        self.close_stdin()
        self.exit = exit
        self._publish(exit)
        self._watchers.clear()
        self.ended.set()

    async def write_stdin(self, data: bytes) -> None:
        """Write ``data`` to the process's stdin; :class:`StdinError` if it
        has none (not asked for, or closed) or it stopped reading."""
        if self._stdin is None:
            raise StdinError("stdin not enabled or closed")
        loop = asyncio.get_running_loop()
        view = memoryview(data)
        while view:
            fd = self._stdin
            if fd is None:
                raise StdinError("stdin closed while writing")
            try:
                written = os.write(fd, view)
            except BlockingIOError:
                ready = loop.create_future()
                loop.add_writer(fd, ready.set_result, None)
                try:
                    await asyncio.wait_for(ready, 30)
                finally:
                    loop.remove_writer(fd)
                continue
            except OSError as exc:
                raise StdinError(f"error writing to stdin of process {self.pid}: {exc}") from exc
            view = view[written:]

    def close_stdin(self) -> None:
        """Signal EOF on stdin (nothing if it has none)."""
        if self._stdin is not None:
            fd, self._stdin = self._stdin, None
            os.close(fd)


class ProcessTable:
    """The running processes of one sandbox, by pid."""

    def __init__(
        self, reaper: Reaper, on_end: Callable[[RunningProcess], None], group_signals: bool
    ) -> None:
        self._reaper = reaper
        self._on_end = on_end
        self._group = group_signals
        self._running: dict[int, RunningProcess] = {}

    def start(
        self,
        argv: Sequence[str],
        env: Mapping[str, str],
        *,
        user: str,
        cmd: str,
        args: Sequence[str],
        envs: Mapping[str, str],
        cwd: str,
        tag: str | None,
        stdin: bool,
    ) -> RunningProcess:
        """Spawn ``argv``; raises ``OSError`` if it could not start."""
        out_r, out_w = os.pipe()
        err_r, err_w = os.pipe()
        if stdin:
            in_r, in_w = os.pipe()
        else:
            in_r, in_w = os.open(os.devnull, os.O_RDONLY), -1
        try:
            pid, exit_future = self._reaper.spawn(argv, env, stdin=in_r, stdout=out_w, stderr=err_w)
        except OSError:
            for fd in (out_r, err_r, in_w):
                if fd >= 0:
                    os.close(fd)
            raise
        finally:
            for fd in (out_w, err_w, in_r):
                os.close(fd)
        if in_w >= 0:
            os.set_blocking(in_w, False)
        process = RunningProcess(
            pid=pid,
            user=user,
            cmd=cmd,
            args=args,
            envs=envs,
            cwd=cwd,
            tag=tag,
            exit_future=exit_future,
            stdout=out_r,
            stderr=err_r,
            stdin=in_w if in_w >= 0 else None,
        )
        self._running[pid] = process
        process.start_reading()
        exit_future.add_done_callback(lambda done: self._ended(process, done.result()))
        return process

    def _ended(self, process: RunningProcess, exit: Exit) -> None:
        process.finish(exit)
        self._running.pop(process.pid, None)
        self._on_end(process)

    def get(self, pid: int) -> RunningProcess | None:
        return self._running.get(pid)

    def by_tag(self, tag: str) -> RunningProcess | None:
        for process in self._running.values():
            if process.tag == tag:
                return process
        return None

    def running(self) -> list[RunningProcess]:
        return list(self._running.values())

    def signal(self, process: RunningProcess, number: int) -> None:
        """Send signal ``number`` to the process's group (or the process
        alone, when the table was made with ``group_signals=False``)."""
        with contextlib.suppress(ProcessLookupError):
            if self._group:
                os.killpg(process.pid, number)
            else:
                os.kill(process.pid, number)

    def kill_all(self) -> None:
        for process in self.running():
            self.signal(process, signal.SIGKILL)
