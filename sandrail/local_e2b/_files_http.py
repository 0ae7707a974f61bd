"""envd's plain-HTTP file API: ``GET /files`` (``files.read``) and
``POST /files`` (``files.write`` and ``write_files``, multipart or
``application/octet-stream``, optionally gzip-encoded).

As envd: the ``username`` query parameter picks the user (default ``user``),
a relative path is taken from that user's home, missing parent directories
are created, and new files and directories belong to that user. ``GET``
honours a single ``Range`` (206) and ``Accept-Encoding: gzip``. Uploads are
streamed to spool files outside the sandbox, never held whole, and written
to their targets only once the whole body was read and accepted: a body
that inflates past ``max_upload_bytes`` (413), a malformed one (400) or one
cut off midway leaves every target as it was, and creates nothing. An
upload's ``X-Metadata-*`` headers become every written file's metadata,
replacing what it had (``_metadata``); the answer lists each file with the
metadata it now has. Each file is written with envd's system calls in
envd's order (so a watcher sees the same events): an existing file is
handed to the user, then truncated; a new one created, then handed over;
then the body; then the metadata.
"""

from __future__ import annotations

import errno
import os
import re
import stat as stat_module
import tempfile
import zlib
from collections.abc import AsyncIterator
from typing import Any, BinaryIO

from python_multipart.multipart import MultipartParser, parse_options_header

from ._asgi import Receive, Scope, Send, body_chunks, drain, header, query, send_bytes, send_json
from ._fsview import expand_path
from ._isolation import User
from ._metadata import from_headers, validate, write_metadata
from ._sandboxes import Sandbox

__all__ = ["read_file", "write_files"]

_CHUNK = 256 * 1024
_RANGE = re.compile(r"^bytes=(\d*)-(\d*)$")
_STATUS = {
    errno.ENOENT: 404,
    errno.EISDIR: 400,
    errno.ENOTDIR: 400,
    errno.EINVAL: 400,
    errno.EACCES: 403,
    errno.EPERM: 403,
    errno.EROFS: 403,
    errno.ENOSPC: 507,
    errno.ELOOP: 400,
    errno.ENAMETOOLONG: 400,
}


class _Refused(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


def _error(exc: OSError, path: str) -> _Refused:
    return _Refused(_STATUS.get(exc.errno or 0, 500), f"{exc.strerror or exc}: {path}")


async def _answer_error(send: Send, error: _Refused) -> None:
    await send_json(send, error.status, {"code": error.status, "message": str(error)})


def _user(sandbox: Sandbox, params: dict[str, str]) -> User:
    name = params.get("username") or "user"
    user = sandbox.root.users.get(name)
    if user is None:
        raise _Refused(401, f"error looking up user '{name}': unknown user")
    return user


def _path(raw: str | None, user: User) -> str:
    try:
        return expand_path(raw or "", user.home)
    except ValueError as exc:
        raise _Refused(400, str(exc)) from exc


def _target(raw: str, user: User) -> str:
    """The path of a file to write: never one that names a directory (a
    trailing ``/``), which normalising would turn into a file's name."""
    if raw.endswith("/"):
        raise _Refused(400, f"path '{raw}' names a directory, not a file")
    return _path(raw, user)


async def read_file(scope: Scope, receive: Receive, send: Send, sandbox: Sandbox) -> None:
    """``GET /files?path=&username=``: the file's bytes (see module doc)."""
    try:
        params = query(scope)
        path = _path(params.get("path"), _user(sandbox, params))
        try:
            # O_NONBLOCK: opening a FIFO a command made must not stall the server.
            fd = sandbox.files.open(path, os.O_RDONLY | os.O_NONBLOCK)
        except OSError as exc:
            if exc.errno == errno.ENOENT:
                raise _Refused(404, f"path '{path}' does not exist") from exc
            raise _error(exc, path) from exc
    except _Refused as error:
        await _answer_error(send, error)
        return
    try:
        info = os.fstat(fd)
        if stat_module.S_ISDIR(info.st_mode):
            await _answer_error(send, _Refused(400, f"path '{path}' is a directory"))
            return
        if not stat_module.S_ISREG(info.st_mode):
            await _answer_error(send, _Refused(400, f"path '{path}' is not a regular file"))
            return
        await _send_file(scope, send, fd, info.st_size)
    finally:
        os.close(fd)


async def _send_file(scope: Scope, send: Send, fd: int, size: int) -> None:
    start, end, status = 0, size, 200
    headers = [(b"content-type", b"application/octet-stream"), (b"accept-ranges", b"bytes")]
    wanted = header(scope, "range")
    gzip = "gzip" in (header(scope, "accept-encoding") or "") and wanted is None
    if wanted is not None:
        match = _RANGE.match(wanted.strip())
        if match is None or match.groups() == ("", ""):
            await send_bytes(send, 416, b"", headers=[("content-range", f"bytes */{size}")])
            return
        first, last = match.groups()
        if first:
            start, end = int(first), (min(int(last) + 1, size) if last else size)
        else:
            start, end = max(0, size - int(last)), size
        if start >= size or start >= end:
            await send_bytes(send, 416, b"", headers=[("content-range", f"bytes */{size}")])
            return
        status = 206
        headers.append((b"content-range", f"bytes {start}-{end - 1}/{size}".encode()))
    if gzip:
        headers.append((b"content-encoding", b"gzip"))
    else:
        headers.append((b"content-length", str(end - start).encode()))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    compressor = zlib.compressobj(wbits=31) if gzip else None
    position = start
    while position < end:
        chunk = os.pread(fd, min(_CHUNK, end - position), position)
        if not chunk:
            break
        position += len(chunk)
        if compressor is not None:
            chunk = compressor.compress(chunk)
        await send({"type": "http.response.body", "body": chunk, "more_body": True})
    tail = compressor.flush() if compressor is not None else b""
    await send({"type": "http.response.body", "body": tail, "more_body": False})


class _Sink:
    """Takes an upload's files into spool files first, counting bytes
    against the limit, and writes them to their targets only once the whole
    body was read and accepted (:meth:`commit`): a body refused or cut
    midway leaves every target as it was (see the module doc)."""

    def __init__(self, sandbox: Sandbox, user: User, limit: int, metadata: dict[str, str]) -> None:
        self.sandbox, self.user, self.limit = sandbox, user, limit
        self.metadata = metadata
        self.written = 0
        self.done: list[dict[str, Any]] = []
        self._parts: list[tuple[str, BinaryIO]] = []
        self._spool: BinaryIO | None = None
        self.path = ""

    def open(self, path: str) -> None:
        if any(taken == path for taken, _ in self._parts) or path == self.path:
            raise _Refused(
                400,
                f"you cannot upload multiple files to the same path '{path}' in one upload request",
            )
        try:
            self.sandbox.files.check_writable(path)
        except OSError as exc:
            raise _error(exc, path) from exc
        # Outside the sandbox's own directories: nothing in it sees the spool.
        # It outlives this call; ``abort`` closes it.
        self._spool = tempfile.TemporaryFile(dir=self.sandbox.root.directory)  # noqa: SIM115
        self.path = path

    def write(self, data: bytes) -> None:
        self.written += len(data)
        if self.written > self.limit:
            raise _Refused(413, f"upload larger than {self.limit} bytes")
        assert self._spool is not None
        try:
            self._spool.write(data)
        except OSError as exc:
            raise _error(exc, self.path) from exc

    def close(self) -> None:
        """End the current file (still only spooled)."""
        if self._spool is not None:
            self._parts.append((self.path, self._spool))
            self._spool, self.path = None, ""

    def commit(self) -> None:
        """Write every spooled file to its target, in order."""
        for path, spool in self._parts:
            self._write(path, spool)

    def _write(self, path: str, spool: BinaryIO) -> None:
        spool.flush()
        size = spool.tell()
        try:
            fd = self.sandbox.files.create_file(path, self.user.uid, self.user.gid)
        except OSError as exc:
            raise _error(exc, path) from exc
        try:
            sent = 0
            while sent < size:
                sent += os.sendfile(fd, spool.fileno(), sent, size - sent)
            write_metadata(fd, self.metadata)
        except OSError as exc:
            raise _error(exc, path) from exc
        finally:
            os.close(fd)
        done: dict[str, Any] = {"path": path, "name": os.path.basename(path), "type": "file"}
        kept = self.sandbox.files.metadata(path)
        if kept:
            done["metadata"] = kept
        self.done.append(done)

    def abort(self) -> None:
        """Drop every spooled file; no target was touched."""
        for _, spool in self._parts:
            spool.close()
        if self._spool is not None:
            self._spool.close()
        self._parts, self._spool = [], None


async def _inflated(scope: Scope, receive: Receive) -> AsyncIterator[bytes]:
    encoding = (header(scope, "content-encoding") or "identity").strip().lower()
    if encoding not in ("gzip", "identity"):
        raise _Refused(400, f"unsupported Content-Encoding: {encoding}")
    inflate = zlib.decompressobj(wbits=31) if encoding == "gzip" else None
    async for chunk in body_chunks(receive):
        if inflate is None:
            yield chunk
            continue
        try:
            while chunk:
                out = inflate.decompress(chunk, _CHUNK)  # bounded: a gzip bomb stays small
                chunk = inflate.unconsumed_tail
                yield out
        except zlib.error as exc:
            raise _Refused(400, f"error decompressing request body: {exc}") from exc


async def write_files(
    scope: Scope, receive: Receive, send: Send, sandbox: Sandbox, limit: int
) -> None:
    """``POST /files?path=&username=``: write the body's file(s) and answer
    their ``{path, name, type}`` list (see module doc)."""
    try:
        params = query(scope)
        user = _user(sandbox, params)
        metadata = from_headers(
            (bytes(k).decode("latin-1"), bytes(v).decode("latin-1"))
            for k, v in scope.get("headers", ())
        )
        try:
            validate(metadata)
        except ValueError as exc:
            raise _Refused(400, f"invalid metadata: {exc}") from exc
        sink = _Sink(sandbox, user, limit, metadata)
        media, options = parse_options_header(header(scope, "content-type") or "")
        try:
            if media == b"application/octet-stream":
                if not params.get("path"):
                    raise _Refused(400, "path query parameter is required for raw body upload")
                sink.open(_target(params["path"], user))
                async for chunk in _inflated(scope, receive):
                    sink.write(chunk)
                sink.close()
            elif media.startswith(b"multipart/") and options.get(b"boundary"):
                await _multipart(scope, receive, sink, params, options[b"boundary"], limit)
            else:
                raise _Refused(
                    400,
                    f"unsupported content type: {media.decode('latin-1')}, expected "
                    "multipart/form-data or application/octet-stream",
                )
            sink.commit()
        finally:
            sink.abort()
    except _Refused as error:
        await drain(receive)
        await _answer_error(send, error)
        return
    await send_json(send, 200, sink.done)


async def _multipart(
    scope: Scope,
    receive: Receive,
    sink: _Sink,
    params: dict[str, str],
    boundary: bytes,
    limit: int,
) -> None:
    part: dict[str, Any] = {}
    failure: list[_Refused] = []

    def header_field(data: bytes, start: int, end: int) -> None:
        part["field"] = part.get("field", b"") + data[start:end]

    def header_value(data: bytes, start: int, end: int) -> None:
        part["value"] = part.get("value", b"") + data[start:end]

    def header_end() -> None:
        part.setdefault("headers", {})[part.pop("field", b"").lower()] = part.pop("value", b"")

    def headers_finished() -> None:
        _, disposition = parse_options_header(part.get("headers", {}).get(b"content-disposition"))
        if disposition.get(b"name") != b"file":
            part["skip"] = True
            return
        name = params.get("path") or disposition.get(b"filename", b"").decode("utf-8", "replace")
        if not name:
            failure.append(_Refused(400, "a file part has no filename and no path was given"))
            part["skip"] = True
            return
        try:
            sink.open(_target(name, sink.user))
        except _Refused as exc:
            failure.append(exc)
            part["skip"] = True

    def part_data(data: bytes, start: int, end: int) -> None:
        if not part.get("skip") and not failure:
            try:
                sink.write(data[start:end])
            except _Refused as exc:
                failure.append(exc)

    def part_end() -> None:
        if not part.get("skip"):
            sink.close()
        part.clear()

    parser = MultipartParser(
        boundary,
        {
            "on_header_field": header_field,
            "on_header_value": header_value,
            "on_header_end": header_end,
            "on_headers_finished": headers_finished,
            "on_part_data": part_data,
            "on_part_end": part_end,
        },
    )
    async for chunk in _inflated(scope, receive):
        try:
            parser.write(chunk)
        except Exception as exc:
            raise _Refused(400, f"error reading form: {exc}") from exc
        if failure:
            raise failure[0]
    parser.finalize()
    if failure:
        raise failure[0]
