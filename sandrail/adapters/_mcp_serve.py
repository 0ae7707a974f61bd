"""What ``sandrail mcp`` needs besides the server: choosing where commands
run, saying so, and serving streamable HTTP until a signal ends it cleanly.

A server a user adds to a desktop client must not let a model believe its
code ran when it did not: with no ``--backend``, it runs on E2B
when ``E2B_API_KEY`` is set and refuses to start otherwise, naming both
choices; the simulator serves only when asked for by name, and says so in
every tool description, result and ``sandbox_status``.
"""

from __future__ import annotations

import asyncio
import logging
import signal
from collections.abc import Callable, Mapping
from typing import Any, Final

__all__ = ["NO_BACKEND", "choose_backend", "serve_http", "startup_line"]

NO_BACKEND: Final = (
    "sandrail mcp needs to know where commands run: set E2B_API_KEY (in the client's "
    "config, its env block) to run them in E2B sandboxes, or pass --backend simulator "
    "to try a client against sandrail's in-memory simulator (nothing really runs)."
)


def choose_backend(requested: str | None, environ: Mapping[str, str]) -> str:
    """``requested`` when given; else ``"e2b"`` when ``E2B_API_KEY`` is set
    (non-blank). Raises ``ValueError`` with :data:`NO_BACKEND` otherwise."""
    if requested is not None:
        return requested
    if environ.get("E2B_API_KEY", "").strip():
        return "e2b"
    raise ValueError(NO_BACKEND)


def startup_line(backend: str, transport: str, where: str) -> str:
    """The line ``sandrail mcp`` prints on standard error as it starts."""
    if backend == "simulator":
        return (
            f"sandrail mcp ({transport}): serving sandrail's in-memory SIMULATOR: no command "
            "really runs. Set E2B_API_KEY and drop --backend simulator to run them in E2B."
        )
    return f"sandrail mcp ({transport}): commands run in E2B sandboxes{where}."


_SESSION_CLOSED_LOGGER: Final = "mcp.server.streamable_http"


class _ClientGone(logging.Filter):
    """Drops the MCP SDK's ``Error handling POST request`` traceback when
    the error is only that the session's streams are closed (its client
    cancelled and left). Any other error of that
    logger, and every other logger, is printed as before."""

    def filter(self, record: logging.LogRecord) -> bool:
        error = record.exc_info[1] if record.exc_info else None
        return not isinstance(error, _closed_stream_errors())


def _closed_stream_errors() -> tuple[type[BaseException], ...]:
    import anyio

    return (anyio.ClosedResourceError, anyio.BrokenResourceError)


class _QuietAfterTheResponse:
    """ASGI middleware: once the app has sent its whole response, it cannot
    send another, and a closed session stream it then meets is not an error
    of this request.

    Strategy: the MCP SDK answers a notification (``202``) before it hands
    it to the session; when the client has cancelled and left meanwhile,
    the session's stream is closed, and the SDK logs the error, starts a
    second response (uvicorn raises: ``Unexpected ASGI message
    'http.response.start'``) and re-raises the closed stream (uvicorn
    prints ``Exception in ASGI application``). The cause is inside the SDK;
    here a message after the response is dropped, and a closed-stream error
    after the response is the end of the request. Anything else raises."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope.get("type") != "http":
            await self.app(scope, receive, send)
            return
        finished = False

        async def send_once(message: Any) -> None:
            nonlocal finished
            if finished:
                return
            if message.get("type") == "http.response.body" and not message.get("more_body"):
                finished = True
            await send(message)

        try:
            await self.app(scope, receive, send_once)
        except _closed_stream_errors():
            if not finished:
                raise


def serve_http(app: Any, host: str, port: int, say: Callable[[str], None]) -> str:
    """Serve the ASGI ``app`` with uvicorn on ``host:port`` until SIGINT or
    SIGTERM, then shut down gracefully (open requests finish, the backend
    is the caller's to close) and return the signal's name. ``say`` is
    called with one line when serving starts and one when it stops. A
    client that cancels and leaves prints no traceback (see
    :class:`_QuietAfterTheResponse`).

    Strategy: uvicorn's own handlers re-raise the signal once it has shut
    down, so Ctrl-C ended in ``KeyboardInterrupt`` (click prints ``Aborted!``
    and exits 1) and SIGTERM killed the process without a word. Here the
    event loop's own signal handlers ask uvicorn to exit and remember which
    signal it was, and uvicorn's are never installed.
    """
    import uvicorn

    class Quiet(uvicorn.Server):
        def install_signal_handlers(self) -> None:  # uvicorn < 0.29
            pass

        def capture_signals(self) -> Any:  # uvicorn >= 0.29
            import contextlib

            return contextlib.nullcontext()

    logging.getLogger(_SESSION_CLOSED_LOGGER).addFilter(_ClientGone())
    config = uvicorn.Config(_QuietAfterTheResponse(app), host=host, port=port, log_level="warning")
    server = Quiet(config)
    received: list[str] = []

    async def main() -> None:
        loop = asyncio.get_running_loop()

        def stop(signum: signal.Signals) -> None:
            received.append(signum.name)
            server.should_exit = True

        for signum in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(signum, stop, signum)
        say(f"sandrail mcp: serving http://{host}:{port}/mcp (Ctrl-C stops it)")
        await server.serve()

    asyncio.run(main())
    name = received[0] if received else "shutdown"
    say(f"sandrail mcp: stopped ({name}); the server shut down cleanly")
    return name
