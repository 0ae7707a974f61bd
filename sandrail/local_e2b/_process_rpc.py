"""envd's ``process.Process`` service, served by the SDK's own generated
``ProcessASGIApplication``.

Strategy: the envd router (``_envd``) puts the request's sandbox and user
in context variables before the Connect application runs, so one service
object serves every sandbox. Streams follow envd's ``Start``/``Connect``
handlers: a ``start`` event first, then ``data`` events as output arrives,
a ``keepalive`` after each quiet ``Keepalive-Ping-Interval`` seconds, and
``end``. A ``Start`` with a ``Connect-Timeout-Ms`` deadline kills the command
(its process group) when the deadline passes and ends the stream with
``deadline_exceeded``, which the SDK raises as ``TimeoutException``; the
client does not enforce that deadline itself. A client that goes away does
not stop the command, as on E2B.
"""

from __future__ import annotations

import asyncio
import contextvars
import posixpath
import signal
import stat as stat_module
import time
from collections.abc import AsyncIterator
from typing import Any

from connectrpc.code import Code
from connectrpc.errors import ConnectError
from e2b.envd.process import process_pb as pb
from e2b.envd.process.process_connect import Process, ProcessASGIApplication
from protobuf import Oneof

from ._json_guard import guarded_codecs
from ._processes import Output, RunningProcess, StdinError
from ._reaper import Exit
from ._sandboxes import Sandbox
from ._truth import TruthLog

__all__ = [
    "CURRENT_SANDBOX",
    "CURRENT_USER",
    "ProcessService",
    "keepalive_interval",
    "process_app",
]

CURRENT_SANDBOX: contextvars.ContextVar[Sandbox] = contextvars.ContextVar("local_e2b_sandbox")
CURRENT_USER: contextvars.ContextVar[str] = contextvars.ContextVar("local_e2b_user")

_SIGNALS = {pb.Signal.SIGKILL: signal.SIGKILL, pb.Signal.SIGTERM: signal.SIGTERM}


def _event(response: type[Any], name: str, value: Any) -> Any:
    oneof: Any = Oneof(name, value)
    return response(event=pb.ProcessEvent(event=oneof))


def _start_event(response: type[Any], pid: int) -> Any:
    return _event(response, "start", pb.ProcessEvent.StartEvent(pid=pid))


def _end_event(response: type[Any], exit: Exit) -> Any:
    end = pb.ProcessEvent.EndEvent(exit_code=exit.exit_code, exited=exit.exited, status=exit.status)
    if exit.exit_code != 0:
        end.error = exit.status
    return _event(response, "end", end)


def keepalive_interval(ctx: Any, override: float | None) -> float:
    """Seconds between a stream's keepalives: ``override``, else the
    client's ``Keepalive-Ping-Interval`` (at least 1), else 50."""
    if override is not None:
        return override
    try:
        return max(1.0, float(ctx.request_headers.get("keepalive-ping-interval", "50")))
    except ValueError:
        return 50.0


class ProcessService(Process):
    """The ``process.Process`` service of every sandbox (see module doc)."""

    def __init__(self, truth: TruthLog, keepalive_seconds: float | None) -> None:
        self._truth = truth
        self._keepalive = keepalive_seconds

    def _find(self, selector: pb.ProcessSelector | None) -> RunningProcess:
        sandbox = CURRENT_SANDBOX.get()
        chosen = selector.selector if selector is not None else None
        value = None if chosen is None else chosen.value
        if isinstance(value, int):
            found = sandbox.processes.get(value)
            if found is None:
                raise ConnectError(Code.NOT_FOUND, f"process with pid {value} not found")
            return found
        if isinstance(value, str):
            found = sandbox.processes.by_tag(value)
            if found is None:
                raise ConnectError(Code.NOT_FOUND, f"process with tag {value} not found")
            return found
        raise ConnectError(Code.INVALID_ARGUMENT, "a process selector (pid or tag) is required")

    async def list(self, request: pb.ListRequest, ctx: Any, /) -> pb.ListResponse:
        sandbox = CURRENT_SANDBOX.get()
        processes = []
        for process in sandbox.processes.running():
            config = pb.ProcessConfig(
                cmd=process.cmd, args=list(process.args), envs=process.envs, cwd=process.cwd
            )
            info = pb.ProcessInfo(config=config, pid=process.pid)
            if process.tag is not None:
                info.tag = process.tag
            processes.append(info)
        return pb.ListResponse(processes=processes)

    def _launch(self, request: pb.StartRequest) -> RunningProcess:
        sandbox = CURRENT_SANDBOX.get()
        user = CURRENT_USER.get()
        config = request.process or pb.ProcessConfig()
        if request.pty is not None:
            raise ConnectError(Code.UNIMPLEMENTED, "local-e2b does not support PTYs")
        if not config.cmd:
            raise ConnectError(Code.INVALID_ARGUMENT, "process.cmd is required")
        home = sandbox.root.users[user].home
        raw_cwd = config.cwd if config.has_field("cwd") else ""
        cwd = posixpath.normpath(posixpath.join(home, raw_cwd)) if raw_cwd else home
        try:
            is_dir = sandbox.files.stat(cwd).st_mode & 0o170000 == 0o040000
        except OSError:
            is_dir = False
        if not is_dir:
            raise ConnectError(Code.INVALID_ARGUMENT, f"cwd '{cwd}' does not exist")
        envs = dict(config.envs)
        env = sandbox.root.environment(user, sandbox.default_env, sandbox.env_vars, envs)
        if not _findable(sandbox, config.cmd, env.get("PATH", ""), cwd):
            # As envd (Go's exec.LookPath): the start fails, nothing runs.
            raise ConnectError(
                Code.INVALID_ARGUMENT,
                f'error starting process: exec: "{config.cmd}": executable file not found in $PATH',
            )
        argv = sandbox.root.argv(user, cwd, config.cmd, list(config.args))
        tag = request.tag if request.has_field("tag") else None
        stdin = request.stdin if request.has_field("stdin") else True
        try:
            process = sandbox.processes.start(
                argv,
                env,
                user=user,
                cmd=config.cmd,
                args=list(config.args),
                envs=envs,
                cwd=cwd,
                tag=tag,
                stdin=stdin,
            )
        except (OSError, ValueError) as exc:  # ValueError: a NUL in argv or env
            raise ConnectError(Code.INVALID_ARGUMENT, f"error starting process: {exc}") from exc
        args = list(config.args)
        command = args[-1] if len(args) >= 2 and args[-2] == "-c" else " ".join([config.cmd, *args])
        self._truth.write(
            "process_started",
            sandbox_id=sandbox.sandbox_id,
            pid=process.pid,
            user=user,
            uid=sandbox.root.users[user].uid,
            argv=[config.cmd, *args],
            command=command,
            cwd=cwd,
            tag=tag,
        )
        return process

    async def start(self, request: pb.StartRequest, ctx: Any, /) -> AsyncIterator[pb.StartResponse]:
        process = self._launch(request)
        sandbox = CURRENT_SANDBOX.get()
        # As envd: a Connect-Timeout-Ms of 0 means no deadline.
        deadline = ctx.timeout_ms if ctx.request_headers.get("connect-timeout-ms") != "0" else None
        expired = asyncio.Event()
        if deadline is not None:
            # Like envd's process context: the deadline kills the command
            # whether or not anyone still watches the stream.
            timer = asyncio.get_running_loop().call_later(
                max(0.0, deadline / 1000), self._deadline, sandbox, process, expired
            )
            process.exit_future.add_done_callback(lambda _: timer.cancel())
        async for event in _follow(
            sandbox,
            process,
            pb.StartResponse,
            keepalive_interval(ctx, self._keepalive),
            deadline,
            expired,
        ):
            yield event

    def _deadline(self, sandbox: Sandbox, process: RunningProcess, expired: asyncio.Event) -> None:
        if process.exit is None:
            # Before the kill: the stream ends deadline_exceeded whichever
            # it sees first, its own clock or the end of the killed command.
            expired.set()
            self._truth.write(
                "process_signalled",
                sandbox_id=sandbox.sandbox_id,
                pid=process.pid,
                signal=int(signal.SIGKILL),
                reason="deadline",
            )
            sandbox.processes.signal(process, signal.SIGKILL)

    async def connect(
        self, request: pb.ConnectRequest, ctx: Any, /
    ) -> AsyncIterator[pb.ConnectResponse]:
        process = self._find(request.process)
        sandbox = CURRENT_SANDBOX.get()
        async for event in _follow(
            sandbox,
            process,
            pb.ConnectResponse,
            keepalive_interval(ctx, self._keepalive),
            ctx.timeout_ms,
        ):
            yield event

    async def update(self, request: pb.UpdateRequest, ctx: Any, /) -> pb.UpdateResponse:
        self._find(request.process)
        raise ConnectError(
            Code.UNIMPLEMENTED, "local-e2b does not support PTYs (nothing to resize)"
        )

    async def stream_input(
        self, request: AsyncIterator[pb.StreamInputRequest], ctx: Any, /
    ) -> pb.StreamInputResponse:
        process: RunningProcess | None = None
        async for message in request:
            value = None if message.event is None else message.event.value
            if isinstance(value, pb.StreamInputRequest.StartEvent):
                process = self._find(value.process)
            elif isinstance(value, pb.StreamInputRequest.DataEvent):
                if process is None:
                    raise ConnectError(Code.INVALID_ARGUMENT, "data before the start event")
                await self._write(process, value.input)
        return pb.StreamInputResponse()

    async def _write(self, process: RunningProcess, given: pb.ProcessInput | None) -> None:
        match given.input if given is not None else None:
            case Oneof(field="stdin", value=data):
                try:
                    await process.write_stdin(data)
                except StdinError as exc:
                    raise ConnectError(Code.FAILED_PRECONDITION, str(exc)) from exc
            case Oneof(field="pty"):
                raise ConnectError(Code.UNIMPLEMENTED, "local-e2b does not support PTYs")
            case _:
                raise ConnectError(Code.INVALID_ARGUMENT, "input must be stdin bytes")

    async def send_input(self, request: pb.SendInputRequest, ctx: Any, /) -> pb.SendInputResponse:
        await self._write(self._find(request.process), request.input)
        return pb.SendInputResponse()

    async def send_signal(
        self, request: pb.SendSignalRequest, ctx: Any, /
    ) -> pb.SendSignalResponse:
        process = self._find(request.process)
        number = _SIGNALS.get(request.signal)
        if number is None:
            raise ConnectError(Code.INVALID_ARGUMENT, "signal must be SIGKILL or SIGTERM")
        sandbox = CURRENT_SANDBOX.get()
        self._truth.write(
            "process_signalled",
            sandbox_id=sandbox.sandbox_id,
            pid=process.pid,
            signal=int(number),
            reason="request",
        )
        sandbox.processes.signal(process, number)
        return pb.SendSignalResponse()

    async def close_stdin(
        self, request: pb.CloseStdinRequest, ctx: Any, /
    ) -> pb.CloseStdinResponse:
        self._find(request.process).close_stdin()
        return pb.CloseStdinResponse()


def _findable(sandbox: Sandbox, cmd: str, path: str, cwd: str) -> bool:
    """Whether ``cmd`` names an executable file in the sandbox: itself if
    it has a ``/`` (from ``cwd``), else in a directory of ``path``."""
    if "\0" in cmd:
        return False
    if "/" in cmd:
        candidates = [posixpath.join(cwd, cmd)]
    else:
        candidates = [posixpath.join(directory or cwd, cmd) for directory in path.split(":")]
    for candidate in candidates:
        try:
            mode = sandbox.files.stat(candidate).st_mode
        except OSError:
            continue
        if stat_module.S_ISREG(mode) and mode & 0o111:
            return True
    return False


async def _follow(
    sandbox: Sandbox,
    process: RunningProcess,
    response: type[Any],
    keepalive: float,
    deadline_ms: float | None,
    expired: asyncio.Event | None = None,
) -> AsyncIterator[Any]:
    """The events of one stream watching ``process`` (see module doc).
    ``expired``: set when the command's own deadline killed it (a Start's
    stream then ends ``deadline_exceeded``, never with the killed exit)."""
    queue = process.watch()
    deadline = None if deadline_ms is None else time.monotonic() + deadline_ms / 1000
    try:
        yield _start_event(response, process.pid)
        while True:
            wait = keepalive
            if deadline is not None:
                wait = min(wait, deadline - time.monotonic())
            try:
                event = await asyncio.wait_for(queue.get(), max(0.0, wait))
                process.drained(queue)
            except TimeoutError:
                if deadline is not None and time.monotonic() >= deadline:
                    raise ConnectError(
                        Code.DEADLINE_EXCEEDED, "the command's deadline passed"
                    ) from None
                yield _event(response, "keepalive", pb.ProcessEvent.KeepAlive())
                continue
            if isinstance(event, Output):
                output: Any = Oneof(event.stream, event.data)
                data = pb.ProcessEvent.DataEvent(output=output)
                yield _event(response, "data", data)
            elif not sandbox.alive:
                # E2B's edge loses the connection when the sandbox dies; it
                # does not report the process's end.
                raise ConnectError(
                    Code.UNAVAILABLE,
                    f"the connection to sandbox {sandbox.sandbox_id} ended before the "
                    "stream completed",
                )
            elif expired is not None and expired.is_set():
                raise ConnectError(Code.DEADLINE_EXCEEDED, "the command's deadline passed")
            else:
                yield _end_event(response, event)
                return
    finally:
        process.unwatch(queue)


def process_app(service: ProcessService) -> ProcessASGIApplication:
    """The SDK's generated ASGI application around ``service``."""
    return ProcessASGIApplication(service, codecs=guarded_codecs())
