"""The server process: control plane and envd (two uvicorn apps on Unix
sockets), their front-door proxies on 127.0.0.1, the admin channel, the
reaper, and an orderly stop that kills every sandbox.

``run_server`` is what both ``sandrail local-e2b`` and ``python -m
sandrail.local_e2b`` (started by ``serve()``) run, in the main thread of
their own process: the process becomes a child subreaper and owns every
process it starts.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import secrets
import signal
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import attrs
import uvicorn

from ._admin import serve_admin
from ._control_plane import ControlPlane
from ._envd import Envd
from ._faults import LISTENERS, FaultBook, WireFault
from ._filesystem_rpc import FilesystemService, filesystem_app
from ._isolation import Isolation, detect_isolation
from ._marks import Marks
from ._process_rpc import ProcessService, process_app
from ._proxy import Proxy
from ._reaper import Reaper, make_subreaper
from ._sandboxes import Sandboxes
from ._truth import TruthLog

__all__ = ["ServerInfo", "ServerOptions", "run_server"]

_STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
"""What stops the server in order, every sandbox killed: Ctrl-C, a kill,
and the terminal closing (SIGHUP), which would otherwise end the process
with every sandbox's processes left running."""


@attrs.frozen(kw_only=True)
class ServerOptions:
    """How to run a server. ``api_port``/``envd_port`` 0 pick free ports;
    ``keepalive_seconds`` overrides the client's ``Keepalive-Ping-Interval``;
    ``signal_scope`` is ``"group"`` (signals and deadlines reach the
    command's whole process group) or ``"process"`` (only the command's own
    process, as E2B's envd does)."""

    state_dir: Path
    api_port: int = 0
    envd_port: int = 0
    isolation: str = "auto"
    api_key: str | None = None
    keepalive_seconds: float | None = None
    signal_scope: str = "group"
    max_upload_bytes: int = 256 * 1024 * 1024
    stop_on_stdin_eof: bool = False
    """Stop when standard input closes: ``serve()`` holds the other end, so
    a test process that dies takes its server (and sandboxes) with it."""


@attrs.frozen(kw_only=True)
class ServerInfo:
    """What a started server tells its owner."""

    api_url: str
    sandbox_url: str
    api_key: str
    isolation: str
    mode: str
    state_dir: str
    mark_port: int

    def to_dict(self) -> dict[str, Any]:
        return attrs.asdict(self)


class _Uvicorn(uvicorn.Server):
    """uvicorn without its own signal handling: the server stops it."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


async def _start_uvicorn(app: Any, path: Path) -> tuple[_Uvicorn, asyncio.Task[None]]:
    config = uvicorn.Config(
        app,
        uds=str(path),
        lifespan="off",
        log_level="warning",
        access_log=False,
        http="h11",
        timeout_graceful_shutdown=1,
    )
    server = _Uvicorn(config)
    task = asyncio.create_task(server.serve())
    for _ in range(500):
        if server.started or task.done():
            break
        await asyncio.sleep(0.01)
    if not server.started:
        task.cancel()
        raise RuntimeError(f"uvicorn did not start on {path}")
    return server, task


async def run_server(
    options: ServerOptions,
    ready: Callable[[ServerInfo], None],
    isolation: Isolation | None = None,
) -> None:
    """Run until SIGINT, SIGTERM or SIGHUP, then kill every sandbox and return.
    ``ready`` is called once everything listens. Raises ``IsolationError``
    before listening if sandboxes cannot be isolated here."""
    if options.signal_scope not in ("group", "process"):
        raise ValueError("signal_scope must be 'group' or 'process'")
    isolation = isolation or detect_isolation(options.isolation)
    make_subreaper()
    loop = asyncio.get_running_loop()
    state = options.state_dir
    state.mkdir(mode=0o700, parents=True, exist_ok=True)
    (state / "sandboxes").mkdir(mode=0o700, exist_ok=True)
    reaper = Reaper(loop)
    reaper.install()
    truth = TruthLog(state / "truth.jsonl")
    marks = Marks(truth)
    await marks.open()
    sandboxes = Sandboxes(
        isolation=isolation,
        directory=state / "sandboxes",
        reaper=reaper,
        truth=truth,
        group_signals=options.signal_scope == "group",
        marks=marks,
    )
    api_key = options.api_key or "e2b_" + secrets.token_hex(20)
    envd = Envd(
        sandboxes,
        process_app(ProcessService(truth, options.keepalive_seconds)),
        filesystem_app(FilesystemService(options.keepalive_seconds)),
        options.max_upload_bytes,
    )
    api_server, api_task = await _start_uvicorn(
        ControlPlane(sandboxes, api_key), state / "api.sock"
    )
    envd_server, envd_task = await _start_uvicorn(envd, state / "envd.sock")
    faults = FaultBook()
    proxies = {
        "api": Proxy("api", str(state / "api.sock"), faults, truth, options.api_port),
        "envd": Proxy("envd", str(state / "envd.sock"), faults, truth, options.envd_port),
    }
    for proxy in proxies.values():
        await proxy.open()

    async def admin(request: dict[str, Any]) -> dict[str, Any]:
        op = request.get("op")
        if op == "arm":
            faults.arm(WireFault.from_dict(request["fault"]))
        elif op == "refuse":
            listener = request["listener"]
            faults.refuse(listener, bool(request["on"]))
            await (proxies[listener].refuse() if request["on"] else proxies[listener].open())
        elif op == "clear":
            faults.clear()
            for name in LISTENERS:
                await proxies[name].open()
        elif op == "pending":
            return {"faults": [[f.to_dict(), left] for f, left in faults.pending()]}
        elif op != "ping":
            raise ValueError(f"unknown admin op {op!r}")
        return {}

    admin_server = await serve_admin(state / "admin.sock", admin)
    stop = asyncio.Event()
    for number in _STOP_SIGNALS:
        loop.add_signal_handler(number, stop.set)
    if options.stop_on_stdin_eof:

        def on_stdin() -> None:
            try:
                if os.read(0, 4096):
                    return
            except OSError:
                pass
            loop.remove_reader(0)
            stop.set()

        loop.add_reader(0, on_stdin)
    ready(
        ServerInfo(
            api_url=f"http://127.0.0.1:{proxies['api'].port}",
            sandbox_url=f"http://127.0.0.1:{proxies['envd'].port}",
            api_key=api_key,
            isolation=isolation.description,
            mode=isolation.mode.value,
            state_dir=str(state),
            mark_port=marks.port,
        )
    )
    try:
        await stop.wait()
    finally:
        for number in _STOP_SIGNALS:
            loop.remove_signal_handler(number)
        admin_server.close()
        marks.close()
        for proxy in proxies.values():
            await proxy.close()
        await sandboxes.end_all("server_stopped")
        for server in (api_server, envd_server):
            server.should_exit = True
        await asyncio.gather(api_task, envd_task, return_exceptions=True)
        reaper.reap()
        reaper.uninstall()
        truth.close()
