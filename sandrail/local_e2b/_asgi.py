"""The few ASGI helpers the control plane and envd share."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, MutableMapping
from typing import Any
from urllib.parse import parse_qs

__all__ = [
    "ClientGone",
    "Receive",
    "Scope",
    "Send",
    "TooLarge",
    "TrackedReceive",
    "after_body",
    "body_chunks",
    "drain",
    "header",
    "query",
    "read_body",
    "send_bytes",
    "send_json",
]

Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]


class ClientGone(Exception):
    """The client went away before its request body ended."""


class TrackedReceive:
    """``receive`` that remembers whether the request body has ended and
    can tell when the client goes away after it (:meth:`until_gone`).
    After the body's end, a call waits for the client to go away and then
    answers ``http.disconnect``, as ASGI's ``receive`` does."""

    def __init__(self, receive: Receive) -> None:
        self._receive = receive
        self.done = False
        self._body_done = asyncio.Event()
        self._gone = asyncio.Event()

    async def __call__(self) -> MutableMapping[str, Any]:
        if self.done:
            await self.until_gone()
            return {"type": "http.disconnect"}
        message = await self._receive()
        if message["type"] == "http.disconnect":
            self._gone.set()
        if message["type"] == "http.disconnect" or not message.get("more_body", False):
            self.done = True
            self._body_done.set()
        return message

    async def until_gone(self) -> None:
        """Return once the body has been read and the client went away."""
        await self._body_done.wait()
        while not self._gone.is_set():
            if (await self._receive())["type"] == "http.disconnect":
                self._gone.set()


def after_body(receive: TrackedReceive, send: Send) -> Send:
    """``send`` that first reads whatever is left of the request body
    (:func:`drain`), so an early answer (401, 413, a refused RPC) reaches a
    client that is still sending instead of being lost to a TCP reset."""

    async def send_after_body(message: MutableMapping[str, Any]) -> None:
        if message["type"] == "http.response.start":
            await drain(receive)
        await send(message)

    return send_after_body


class TooLarge(Exception):
    """A request body longer than the limit."""


def header(scope: Scope, name: str) -> str | None:
    """The first value of header ``name`` (lowercase), decoded as latin-1."""
    wanted = name.encode("latin-1")
    for key, value in scope.get("headers", ()):
        if key == wanted:
            return bytes(value).decode("latin-1")
    return None


def query(scope: Scope) -> dict[str, str]:
    """The query parameters (the first value of each)."""
    raw = bytes(scope.get("query_string", b"")).decode("utf-8", "replace")
    return {key: values[0] for key, values in parse_qs(raw, keep_blank_values=True).items()}


async def body_chunks(receive: Receive) -> AsyncIterator[bytes]:
    """The request body, chunk by chunk, until its end; :class:`ClientGone`
    if the client goes away first (a body cut short is never taken whole)."""
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise ClientGone("the client went away before the request body ended")
        chunk = message.get("body", b"")
        if chunk:
            yield bytes(chunk)
        if not message.get("more_body", False):
            return


async def read_body(receive: Receive, limit: int) -> bytes:
    """The whole request body; :class:`TooLarge` past ``limit`` bytes (raised
    once the body is all read, so the client gets to read the answer)."""
    data = bytearray()
    size = 0
    async for chunk in body_chunks(receive):
        size += len(chunk)
        if size <= limit:
            data += chunk
    if size > limit:
        raise TooLarge(f"request body larger than {limit} bytes")
    return bytes(data)


async def drain(receive: Receive) -> None:
    """Read and drop what is left of the request body. An answer sent while
    the client is still sending is lost to a TCP reset on many clients.
    ``receive`` must be a :class:`TrackedReceive`."""
    if isinstance(receive, TrackedReceive) and receive.done:
        return
    try:
        async for _ in body_chunks(receive):
            pass
    except ClientGone:
        return


async def send_bytes(
    send: Send,
    status: int,
    body: bytes,
    content_type: str = "application/octet-stream",
    headers: Iterable[tuple[str, str]] = (),
) -> None:
    """Answer ``status`` with ``body``."""
    raw = [(b"content-type", content_type.encode()), (b"content-length", str(len(body)).encode())]
    raw += [(k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in headers]
    await send({"type": "http.response.start", "status": status, "headers": raw})
    await send({"type": "http.response.body", "body": body, "more_body": False})


async def send_json(
    send: Send, status: int, value: Any, headers: Iterable[tuple[str, str]] = ()
) -> None:
    """Answer ``status`` with ``value`` as JSON (``None`` answers no body)."""
    if value is None:
        await send_bytes(send, status, b"", "text/plain", headers)
        return
    body = json.dumps(value, ensure_ascii=False).encode("utf-8")
    await send_bytes(send, status, body, "application/json", headers)
