"""envd for every sandbox on one address, as an ASGI app.

Like E2B's edge, it routes each request by its ``E2b-Sandbox-Id`` header; a
sandbox that does not exist (never did, was killed, expired) is answered
``502 {"message": "The sandbox ... was not found"}``, which the SDK raises as
``SandboxNotRunningException``. Like envd, every route but ``GET /health``
needs the sandbox's ``X-Access-Token`` (401 otherwise), except that
``/files`` takes a signed URL instead (``_signing``: such a request carries
no sandbox header, so its signature picks the sandbox); the user comes from
``Authorization: Basic base64(user:)`` on RPCs (``username=`` on
``/files``), ``user`` by default; only ``user`` and ``root`` exist. A path
envd does not serve answers 501 "local-e2b does not support ...". A request
whose client goes away is ended at once (``_unless_gone``).
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import contextlib
import secrets
from typing import Any

from ._asgi import (
    ClientGone,
    Receive,
    Scope,
    Send,
    TrackedReceive,
    after_body,
    header,
    query,
    send_json,
)
from ._files_http import read_file, write_files
from ._process_rpc import CURRENT_SANDBOX, CURRENT_USER
from ._sandboxes import Sandbox, Sandboxes
from ._signing import SignatureError, check, signed_by

__all__ = ["Envd", "not_found_body"]


def not_found_body(sandbox_id: str) -> dict[str, Any]:
    """The edge's answer for a sandbox that is not running."""
    return {
        "code": 502,
        "message": f"The sandbox {sandbox_id} was not found",
        "sandboxId": sandbox_id,
    }


def _basic_user(value: str | None) -> str | None:
    if not value:
        return "user"
    scheme, _, encoded = value.partition(" ")
    if scheme.lower() != "basic":
        return None
    try:
        name = base64.b64decode(encoded, validate=True).decode("utf-8").partition(":")[0]
    except (binascii.Error, UnicodeDecodeError):
        return None
    return name or "user"


class Envd:
    """The ASGI app of envd (see module doc)."""

    def __init__(
        self, sandboxes: Sandboxes, process_app: Any, filesystem_app: Any, max_upload_bytes: int
    ) -> None:
        self._sandboxes = sandboxes
        self._process = process_app
        self._filesystem = filesystem_app
        self._max_upload = max_upload_bytes

    def _signed(self, scope: Scope, operation: str) -> Sandbox | None:
        """The live sandbox whose token signed this ``/files`` request."""
        live = ((box.access_token, box) for box in self._sandboxes.live())
        return signed_by(query(scope), operation, live)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return
        tracked = TrackedReceive(receive)
        receive, send = tracked, after_body(tracked, send)
        path, method = scope["path"], scope["method"]
        files = {"GET": "read", "POST": "write"}.get(method) if path == "/files" else None
        sandbox_id = header(scope, "e2b-sandbox-id") or ""
        sandbox = self._sandboxes.get(sandbox_id)
        if sandbox is None and not sandbox_id and files and "signature" in query(scope):
            sandbox = self._signed(scope, files)
            if sandbox is None:
                await _unauthorized(send, "invalid signature")
                return
        if sandbox is None or not sandbox.alive:
            await send_json(send, 502, not_found_body(sandbox_id))
            return
        if path == "/health" and method == "GET":
            await send_json(send, 204, None)
            return
        token = header(scope, "x-access-token")
        if files is not None:
            try:
                check(query(scope), files, sandbox.access_token, token)
            except SignatureError as exc:
                await _unauthorized(send, str(exc))
                return
        elif not secrets.compare_digest((token or "").encode(), sandbox.access_token.encode()):
            await _unauthorized(
                send,
                "unauthorized access, please provide a valid access token or method signing "
                "if supported",
            )
            return
        user = _basic_user(header(scope, "authorization"))
        if files is None and user not in sandbox.root.users:
            await _unauthorized(send, f"invalid username: '{user}'")
            return
        # A change made by an earlier request is in every watch before this one.
        sandbox.pump_watches()
        sandbox_token = CURRENT_SANDBOX.set(sandbox)
        user_token = CURRENT_USER.set(user or "user")
        try:
            handler = asyncio.ensure_future(self._route(scope, receive, send, sandbox))
        finally:
            CURRENT_USER.reset(user_token)
            CURRENT_SANDBOX.reset(sandbox_token)
        await _unless_gone(handler, tracked)

    async def _route(self, scope: Scope, receive: Receive, send: Send, sandbox: Sandbox) -> None:
        path, method = scope["path"], scope["method"]
        if path == "/files" and method == "GET":
            await read_file(scope, receive, send, sandbox)
        elif path == "/files" and method == "POST":
            await write_files(scope, receive, send, sandbox, self._max_upload)
        elif path.startswith("/process.Process/"):
            await self._process(scope, receive, send)
        elif path.startswith("/filesystem.Filesystem/"):
            await self._filesystem(scope, receive, send)
        else:
            message = f"local-e2b does not support {method} {path} (no such envd route)"
            await send_json(send, 501, {"code": 501, "message": message})


async def _unless_gone(handler: asyncio.Future[None], receive: TrackedReceive) -> None:
    """Await ``handler``, but end it when its client goes away: a stream
    (a watch, a command's output) nobody reads any more would otherwise
    hold what it watches until the sandbox ends. A command keeps running,
    as on E2B: only the stream following it ends."""
    gone = asyncio.ensure_future(receive.until_gone())
    try:
        await asyncio.wait([handler, gone], return_when=asyncio.FIRST_COMPLETED)
    finally:
        gone.cancel()
        if handler.done():
            with contextlib.suppress(ClientGone):
                await handler
        else:
            handler.cancel()
            # No one to tell how it ended (the Connect application turns
            # the cancellation into an error of its own).
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await handler


async def _unauthorized(send: Send, message: str) -> None:
    await send_json(send, 401, {"code": 401, "message": message})
