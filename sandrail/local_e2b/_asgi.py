"""The few ASGI helpers the control plane and envd share."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, MutableMapping
from typing import Any
from urllib.parse import parse_qs

__all__ = [
    "Receive",
    "Scope",
    "Send",
    "TooLarge",
    "body_chunks",
    "header",
    "query",
    "read_body",
    "send_bytes",
    "send_json",
]

Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]


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
    """The request body, chunk by chunk, until its end (or a disconnect)."""
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return
        chunk = message.get("body", b"")
        if chunk:
            yield bytes(chunk)
        if not message.get("more_body", False):
            return


async def read_body(receive: Receive, limit: int) -> bytes:
    """The whole request body; :class:`TooLarge` past ``limit`` bytes."""
    data = bytearray()
    async for chunk in body_chunks(receive):
        data += chunk
        if len(data) > limit:
            raise TooLarge(f"request body larger than {limit} bytes")
    return bytes(data)


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
