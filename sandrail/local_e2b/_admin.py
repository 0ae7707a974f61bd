"""The server's private admin channel: a Unix socket in its state directory
(mode 0600) speaking one JSON object per line each way.

Requests: ``{"op": "arm", "fault": {...}}``, ``{"op": "refuse", "listener":
"api"|"envd", "on": bool}``, ``{"op": "clear"}``, ``{"op": "pending"}``.
Answers: ``{"ok": true, ...}`` or ``{"ok": false, "error": text}``. The
client side (:func:`admin_call`) is plain blocking socket code for the
``serve()`` handle in the parent process.
"""

from __future__ import annotations

import asyncio
import json
import os
import socket
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

__all__ = ["AdminError", "admin_call", "serve_admin"]

Handler = Callable[[dict[str, Any]], Awaitable[dict[str, Any]]]


class AdminError(RuntimeError):
    """The server refused or could not answer an admin request."""


async def serve_admin(path: Path, handle: Handler) -> asyncio.Server:
    """Listen on ``path``; each line is answered by ``handle``."""

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while line := await reader.readline():
                try:
                    answer = {"ok": True, **await handle(json.loads(line))}
                except Exception as exc:  # the caller gets every failure as text
                    answer = {"ok": False, "error": f"{type(exc).__name__}: {exc}"}
                writer.write(json.dumps(answer).encode() + b"\n")
                await writer.drain()
        except ConnectionError:
            pass
        finally:
            writer.close()

    server = await asyncio.start_unix_server(serve, path=str(path))
    os.chmod(path, 0o600)
    return server


def admin_call(path: Path, request: dict[str, Any], timeout: float = 10.0) -> dict[str, Any]:
    """Send one request; raises :class:`AdminError` if refused or unreachable."""
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
            sock.settimeout(timeout)
            sock.connect(str(path))
            sock.sendall(json.dumps(request).encode() + b"\n")
            data = b""
            while not data.endswith(b"\n"):
                chunk = sock.recv(65_536)
                if not chunk:
                    break
                data += chunk
    except OSError as exc:
        raise AdminError(f"the local-e2b server is not answering ({exc})") from exc
    if not data:
        raise AdminError("the local-e2b server closed the admin channel")
    answer: dict[str, Any] = json.loads(data)
    if not answer.get("ok"):
        raise AdminError(str(answer.get("error")))
    return answer
