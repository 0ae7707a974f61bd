"""The server's front door: a loopback HTTP/1.1 proxy in front of uvicorn
that records every request and carries out wire faults.

Strategy: each client connection is parsed with h11 (the SDK speaks
HTTP/1.1 on plain ``http://``); each request is matched against the
:class:`FaultBook`, then forwarded to uvicorn over a fresh Unix-socket
connection (one request per upstream connection, ``Connection: close``),
and the answer is relayed back event by event, so a stream reaches the
client as the sandbox produces it. Faults act at the points only a proxy
controls: before the request reaches the app, after the app answered,
between stream messages. Refusing connections closes the listening socket
itself (and idle kept-alive connections), so a client gets
``ECONNREFUSED`` from the kernel.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import socket
import struct
from collections.abc import Callable

import h11

from ._envd import not_found_body
from ._faults import FaultBook, Listener, Route, WireFault, WireFaultKind, route_of
from ._truth import TruthLog

__all__ = ["Proxy"]

_READ = 64 * 1024
_MATCH_LIMIT = 16 * 1024 * 1024
_HOP = {b"connection", b"keep-alive", b"transfer-encoding", b"te", b"upgrade", b"trailer"}


class _Closed(Exception):
    """The client connection is finished (closed, reset or cut on purpose)."""


class _Tally:
    """One exchange: the number its request was recorded under (0: not yet)
    and every byte written to the client for it."""

    def __init__(self, writer: asyncio.StreamWriter) -> None:
        self.writer = writer
        self.number = 0
        self.sent = 0

    def write(self, data: bytes) -> None:
        self.sent += len(data)
        self.writer.write(data)


async def _next(conn: h11.Connection, reader: asyncio.StreamReader) -> h11.Event:
    while True:
        event = conn.next_event()
        if event is h11.NEED_DATA:
            conn.receive_data(await reader.read(_READ))
            continue
        if event is h11.PAUSED:
            raise _Closed
        assert isinstance(event, h11.Event)
        return event


def _reset(writer: asyncio.StreamWriter) -> None:
    """Close ``writer``'s connection with a TCP reset."""
    sock = writer.get_extra_info("socket")
    if sock is not None:
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    writer.transport.abort()


def _stream_cut(data: bytes, seen: bytearray, wanted: int) -> int | None:
    """With ``data`` appended to ``seen`` (the body so far), where in
    ``data`` the ``wanted``-th Connect envelope ends, or ``None`` if not yet."""
    seen += data
    position = count = 0
    while position + 5 <= len(seen):
        end = position + 5 + int.from_bytes(seen[position + 1 : position + 5], "big")
        if end > len(seen):
            break
        position, count = end, count + 1
        if count == wanted:
            return position - (len(seen) - len(data))
    return None


async def _client_gone(conn: h11.Connection, reader: asyncio.StreamReader) -> None:
    """Return once the client has closed its connection (its request is
    all read). What it sends meanwhile (a pipelined request) is kept for
    ``conn``; past a little of it, stop watching."""
    kept = 0
    while kept <= _READ:
        try:
            data = await reader.read(_READ)
        except ConnectionError:
            return
        if not data:
            return
        conn.receive_data(data)
        kept += len(data)
    await asyncio.Event().wait()


class Proxy:
    """One listener (``api`` or ``envd``) on 127.0.0.1, forwarding to the
    uvicorn serving that app on the Unix socket ``upstream``."""

    def __init__(
        self,
        listener: Listener,
        upstream: str,
        faults: FaultBook,
        truth: TruthLog,
        port: int,
        kill: Callable[[], None] | None = None,
    ) -> None:
        self.listener = listener
        self.port = port
        self._upstream = upstream
        self._faults = faults
        self._truth = truth
        self._server: asyncio.Server | None = None
        self._idle: set[asyncio.StreamWriter] = set()
        self._open: set[asyncio.StreamWriter] = set()
        self._count = 0
        self._kill = kill or (lambda: os.kill(os.getpid(), signal.SIGKILL))

    async def open(self) -> None:
        """Listen (again) on ``port``; the first call picks a free port if 0."""
        if self._server is None:
            self._server = await asyncio.start_server(
                self._serve, "127.0.0.1", self.port, reuse_address=True
            )
            self.port = self._server.sockets[0].getsockname()[1]

    async def refuse(self) -> None:
        """Stop listening and drop idle connections: new connections are refused."""
        if self._server is not None:
            self._server.close()
            self._server = None
        for writer in list(self._idle):
            _reset(writer)

    async def close(self) -> None:
        """Stop listening and reset every connection."""
        await self.refuse()
        for writer in list(self._open):
            _reset(writer)
        for _ in range(100):
            if not self._open:
                return
            await asyncio.sleep(0.01)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._open.add(writer)
        conn = h11.Connection(h11.SERVER)
        try:
            while True:
                self._idle.add(writer)
                event = await _next(conn, reader)
                self._idle.discard(writer)
                if not isinstance(event, h11.Request):
                    break
                await self._exchange(conn, reader, writer, event)
                if conn.our_state is not h11.DONE or conn.their_state is not h11.DONE:
                    break
                conn.start_next_cycle()
        except h11.RemoteProtocolError as exc:
            # Headers too large (431) or a malformed request (400): say so
            # before hanging up, as any HTTP server does, never a bare close.
            if conn.our_state in (h11.IDLE, h11.SEND_RESPONSE):
                body = json.dumps({"code": exc.error_status_hint, "message": str(exc)}).encode()
                headers = [
                    ("content-type", "application/json"),
                    ("content-length", str(len(body))),
                    ("connection", "close"),
                ]
                with contextlib.suppress(Exception):
                    writer.write(
                        conn.send(h11.Response(status_code=exc.error_status_hint, headers=headers))
                    )
                    writer.write(conn.send(h11.Data(data=body)))
                    writer.write(conn.send(h11.EndOfMessage()))
                    await writer.drain()
        except (_Closed, ConnectionError, h11.ProtocolError, asyncio.IncompleteReadError):
            pass
        except asyncio.CancelledError:
            # The server is stopping with this exchange in flight. Nothing
            # awaits a connection's task, and asyncio's streams (3.11) would
            # print a cancelled one as an error.
            pass
        finally:
            self._idle.discard(writer)
            self._open.discard(writer)
            writer.close()

    def _record(
        self,
        tally: _Tally,
        request: h11.Request,
        route: Route | None,
        status: int | None,
        fault: WireFault | None,
    ) -> None:
        method = request.method.decode()
        path = request.target.decode("latin-1").split("?", 1)[0]
        sandbox_id = dict(request.headers).get(b"e2b-sandbox-id")
        if sandbox_id is None and route is not None and "{id}" in route.value:
            sandbox_id = path.split("/")[3 if path.startswith("/v2/") else 2].encode()
        self._count += 1
        tally.number = self._count
        self._truth.write(
            "request",
            number=tally.number,
            listener=self.listener,
            method=method,
            path=path,
            route=None if route is None else route.value,
            sandbox_id=None if sandbox_id is None else sandbox_id.decode("latin-1"),
            status=status,
            fault=None if fault is None else fault.kind.value,
        )

    async def _body(self, conn: h11.Connection, reader: asyncio.StreamReader) -> bytes:
        data = bytearray()
        while True:
            event = await _next(conn, reader)
            if isinstance(event, h11.EndOfMessage):
                return bytes(data)
            if not isinstance(event, h11.Data):
                raise _Closed
            data += event.data
            if len(data) > _MATCH_LIMIT:
                raise _Closed

    async def _answer(
        self, conn: h11.Connection, tally: _Tally, status: int, value: object
    ) -> None:
        body = json.dumps(value).encode()
        headers = [
            ("content-type", "application/json"),
            ("content-length", str(len(body))),
            ("connection", "close"),
        ]
        tally.write(conn.send(h11.Response(status_code=status, headers=headers)))
        tally.write(conn.send(h11.Data(data=body)))
        tally.write(conn.send(h11.EndOfMessage()))
        await tally.writer.drain()

    async def _exchange(
        self,
        conn: h11.Connection,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        request: h11.Request,
    ) -> None:
        tally = _Tally(writer)
        try:
            await self._serve_one(conn, reader, writer, request, tally)
        finally:
            if tally.number:
                self._truth.write(
                    "answered", listener=self.listener, number=tally.number, bytes=tally.sent
                )

    async def _serve_one(
        self,
        conn: h11.Connection,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        request: h11.Request,
        tally: _Tally,
    ) -> None:
        route = route_of(request.method.decode(), request.target.decode("latin-1").split("?", 1)[0])
        body = await self._body(conn, reader) if self._faults.wants_body(route) else None
        fault = self._faults.strike(route, body)
        kind = None if fault is None else fault.kind
        if kind is WireFaultKind.DROP_BEFORE_READ:
            self._record(tally, request, route, None, fault)
            _reset(writer)
            raise _Closed
        if kind in (WireFaultKind.STATUS_429, WireFaultKind.STATUS_502_NOT_FOUND):
            if body is None:
                await self._body(conn, reader)
            if kind is WireFaultKind.STATUS_429:
                status, value = (
                    429,
                    {"code": 429, "message": "Rate limit exceeded, please try again later"},
                )
            else:
                sandbox = dict(request.headers).get(b"e2b-sandbox-id", b"").decode("latin-1")
                status, value = 502, not_found_body(sandbox)
            self._record(tally, request, route, status, fault)
            await self._answer(conn, tally, status, value)
            raise _Closed
        up_reader, up_writer = await asyncio.open_unix_connection(self._upstream)
        try:
            await self._relay(
                conn, reader, tally, request, route, body, fault, up_reader, up_writer
            )
        finally:
            up_writer.close()

    async def _relay(
        self,
        conn: h11.Connection,
        reader: asyncio.StreamReader,
        tally: _Tally,
        request: h11.Request,
        route: Route | None,
        body: bytes | None,
        fault: WireFault | None,
        up_reader: asyncio.StreamReader,
        up_writer: asyncio.StreamWriter,
    ) -> None:
        up = h11.Connection(h11.CLIENT)
        headers = [(k, v) for k, v in request.headers if k not in _HOP]
        if body is not None:
            headers = [(k, v) for k, v in headers if k != b"content-length"]
            headers.append((b"content-length", str(len(body)).encode()))
        elif any(k == b"transfer-encoding" for k, _ in request.headers):
            headers.append((b"transfer-encoding", b"chunked"))
        headers.append((b"connection", b"close"))
        up_writer.write(
            up.send(h11.Request(method=request.method, target=request.target, headers=headers))
        )

        async def forward_body() -> None:
            # Strategy: uvicorn may answer early (413, 401) and hang up before
            # the body is all sent; the rest is then read and dropped, so the
            # client finishes sending and reads the answer.
            upstream_open = True

            def put(event: h11.Data | h11.EndOfMessage) -> None:
                nonlocal upstream_open
                if upstream_open and not up_writer.is_closing():
                    try:
                        up_writer.write(up.send(event))
                    except (ConnectionError, h11.LocalProtocolError):
                        upstream_open = False

            if body is not None:
                if body:
                    put(h11.Data(data=body))
                put(h11.EndOfMessage())
            else:
                while True:
                    try:
                        event = await _next(conn, reader)
                    except (_Closed, ConnectionError, h11.ProtocolError):
                        # The client hung up mid-body (a cancelled call):
                        # uvicorn is told by the same hang-up, so its app
                        # stops waiting for the rest.
                        up_writer.close()
                        return
                    if isinstance(event, h11.Data):
                        put(h11.Data(data=event.data))
                        if upstream_open:
                            try:
                                await up_writer.drain()
                            except ConnectionError:
                                upstream_open = False
                    elif isinstance(event, h11.EndOfMessage):
                        put(h11.EndOfMessage())
                        break
                    else:
                        up_writer.close()
                        return
            with contextlib.suppress(ConnectionError):
                await up_writer.drain()

        # Strategy: a client that goes away (mid-body, or while its answer
        # streams) ends the exchange at once, closing the upstream
        # connection: the app sees its client gone and ends the handler,
        # instead of waiting for a body or feeding a stream nobody reads.
        pump = asyncio.create_task(forward_body())
        respond = asyncio.create_task(
            self._respond(conn, tally, request, route, fault, up, up_reader)
        )
        watch: asyncio.Task[None] | None = None
        try:
            await asyncio.wait([pump, respond], return_when=asyncio.FIRST_COMPLETED)
            if not respond.done():
                if pump.exception() is not None:
                    self._gone(tally, request, route, fault)
                watch = asyncio.create_task(_client_gone(conn, reader))
                await asyncio.wait([watch, respond], return_when=asyncio.FIRST_COMPLETED)
                if not respond.done():
                    self._gone(tally, request, route, fault)
            await respond
            await pump
        finally:
            for task in (pump, respond, watch):
                if task is not None and not task.done():
                    task.cancel()
                    with contextlib.suppress(BaseException):
                        await task

    def _gone(
        self, tally: _Tally, request: h11.Request, route: Route | None, fault: WireFault | None
    ) -> None:
        """The client went away before its answer was complete."""
        if not tally.number:
            self._record(tally, request, route, None, fault)
        raise _Closed

    async def _respond(
        self,
        conn: h11.Connection,
        tally: _Tally,
        request: h11.Request,
        route: Route | None,
        fault: WireFault | None,
        up: h11.Connection,
        up_reader: asyncio.StreamReader,
    ) -> None:
        kind = None if fault is None else fault.kind
        writer = tally.writer
        try:
            response = await _next(up, up_reader)
            while isinstance(response, h11.InformationalResponse):
                response = await _next(up, up_reader)
        except (_Closed, ConnectionError, h11.ProtocolError):
            self._record(tally, request, route, None, fault)
            _reset(writer)
            raise _Closed from None
        if not isinstance(response, h11.Response):
            raise _Closed
        if kind is WireFaultKind.DROP_AFTER_EFFECT:
            self._record(tally, request, route, None, fault)
            _reset(writer)
            raise _Closed
        if kind is WireFaultKind.DELAY and fault is not None:
            await asyncio.sleep(fault.seconds)
        self._record(tally, request, route, response.status_code, fault)
        headers = [(k, v) for k, v in response.headers if k not in _HOP]
        tally.write(
            conn.send(
                h11.Response(
                    status_code=response.status_code, headers=headers, reason=response.reason
                )
            )
        )
        await writer.drain()
        cutting = (
            kind in (WireFaultKind.CUT_STREAM, WireFaultKind.KILL_SERVER) and fault is not None
        )
        is_stream = b"connect+" in dict(response.headers).get(b"content-type", b"")
        seen = bytearray()
        if cutting and not is_stream:
            self._cut(writer, kind)
        while True:
            event = await _next(up, up_reader)
            if isinstance(event, h11.Data):
                data = event.data
                if cutting and fault is not None:
                    end = _stream_cut(data, seen, fault.after_events)
                    if end is not None:
                        tally.write(conn.send(h11.Data(data=data[:end])) if end else b"")
                        await writer.drain()
                        self._cut(writer, kind)
                tally.write(conn.send(h11.Data(data=data)))
                await writer.drain()
            elif isinstance(event, h11.EndOfMessage):
                tally.write(conn.send(h11.EndOfMessage()))
                await writer.drain()
                return
            else:
                raise _Closed

    def _cut(self, writer: asyncio.StreamWriter, kind: WireFaultKind | None) -> None:
        if kind is WireFaultKind.KILL_SERVER:
            self._kill()
        writer.close()
        raise _Closed
