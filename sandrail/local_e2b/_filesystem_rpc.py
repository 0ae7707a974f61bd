"""envd's ``filesystem.Filesystem`` service (the RPCs behind the SDK's
``files.list``, ``exists``, ``get_info``, ``make_dir``, ``remove`` and
``rename``), served by the SDK's generated ``FilesystemASGIApplication``.

Paths are expanded as envd does (relative to the requesting user's home)
and resolved inside the sandbox (``_fsview``). Errors map to the codes the
SDK branches on: NOT_FOUND (``FileNotFoundException``, ``exists`` → False),
ALREADY_EXISTS (``make_dir`` → False). Directory watching is not offered.
"""

from __future__ import annotations

import errno
from typing import Any

from connectrpc.code import Code
from connectrpc.errors import ConnectError
from e2b.envd.filesystem import filesystem_pb as pb
from e2b.envd.filesystem.filesystem_connect import Filesystem, FilesystemASGIApplication
from protobuf.wkt.google.protobuf.timestamp_pb import Timestamp

from ._fsview import Entry, expand_path
from ._process_rpc import CURRENT_SANDBOX, CURRENT_USER

__all__ = ["FilesystemService", "filesystem_app", "rpc_error"]

_TYPES = {
    "file": pb.FileType.FILE,
    "dir": pb.FileType.DIRECTORY,
    "symlink": pb.FileType.SYMLINK,
    "other": pb.FileType.UNSPECIFIED,
}
_CODES = {
    errno.ENOENT: Code.NOT_FOUND,
    errno.EEXIST: Code.ALREADY_EXISTS,
    errno.ENOTDIR: Code.INVALID_ARGUMENT,
    errno.EISDIR: Code.INVALID_ARGUMENT,
    errno.EINVAL: Code.INVALID_ARGUMENT,
    errno.ENOTEMPTY: Code.FAILED_PRECONDITION,
    errno.ELOOP: Code.FAILED_PRECONDITION,
    errno.EACCES: Code.PERMISSION_DENIED,
    errno.EPERM: Code.PERMISSION_DENIED,
    errno.EROFS: Code.PERMISSION_DENIED,
    errno.EXDEV: Code.INVALID_ARGUMENT,
}


def rpc_error(exc: OSError, path: str) -> ConnectError:
    """The Connect error for a failed file operation on ``path``."""
    code = _CODES.get(exc.errno or 0, Code.INTERNAL)
    return ConnectError(code, f"{exc.strerror or exc}: {path}")


def _entry(entry: Entry) -> pb.EntryInfo:
    info = pb.EntryInfo(
        name=entry.name,
        type=_TYPES[entry.kind],
        path=entry.path,
        size=entry.size,
        mode=entry.mode,
        permissions=entry.permissions,
        owner=entry.owner,
        group=entry.group,
        modified_time=Timestamp.from_nanos(entry.modified_ns),
        # ``is_symlink`` stays unset: envd 0.6.4, the version advertised, has
        # no such field; a link shows by its ``symlink_target``.
    )
    if entry.symlink_target is not None:
        info.symlink_target = entry.symlink_target
    if entry.metadata:
        info.metadata = dict(entry.metadata)
    return info


def _path(raw: str) -> str:
    sandbox = CURRENT_SANDBOX.get()
    try:
        return expand_path(raw, sandbox.root.users[CURRENT_USER.get()].home)
    except ValueError as exc:
        raise ConnectError(Code.INVALID_ARGUMENT, str(exc)) from exc


class FilesystemService(Filesystem):
    """The ``filesystem.Filesystem`` service of every sandbox; the watch
    RPCs keep the generated protocol's UNIMPLEMENTED answer."""

    async def stat(self, request: pb.StatRequest, ctx: Any, /) -> pb.StatResponse:
        path = _path(request.path)
        try:
            return pb.StatResponse(entry=_entry(CURRENT_SANDBOX.get().files.entry(path)))
        except OSError as exc:
            raise rpc_error(exc, path) from exc

    async def list_dir(self, request: pb.ListDirRequest, ctx: Any, /) -> pb.ListDirResponse:
        path = _path(request.path)
        depth = request.depth or 1
        try:
            entries = CURRENT_SANDBOX.get().files.list_dir(path, depth)
        except OSError as exc:
            raise rpc_error(exc, path) from exc
        return pb.ListDirResponse(entries=[_entry(entry) for entry in entries])

    async def make_dir(self, request: pb.MakeDirRequest, ctx: Any, /) -> pb.MakeDirResponse:
        path = _path(request.path)
        sandbox = CURRENT_SANDBOX.get()
        user = sandbox.root.users[CURRENT_USER.get()]
        try:
            sandbox.files.make_dir(path, user.uid, user.gid)
            return pb.MakeDirResponse(entry=_entry(sandbox.files.entry(path)))
        except OSError as exc:
            raise rpc_error(exc, path) from exc

    async def remove(self, request: pb.RemoveRequest, ctx: Any, /) -> pb.RemoveResponse:
        path = _path(request.path)
        if path == "/":
            raise ConnectError(Code.INVALID_ARGUMENT, "refusing to remove /")
        try:
            CURRENT_SANDBOX.get().files.remove(path)
        except OSError as exc:
            raise rpc_error(exc, path) from exc
        return pb.RemoveResponse()

    async def move(self, request: pb.MoveRequest, ctx: Any, /) -> pb.MoveResponse:
        source, destination = _path(request.source), _path(request.destination)
        sandbox = CURRENT_SANDBOX.get()
        user = sandbox.root.users[CURRENT_USER.get()]
        try:
            sandbox.files.move(source, destination, user.uid, user.gid)
            return pb.MoveResponse(entry=_entry(sandbox.files.entry(destination)))
        except OSError as exc:
            raise rpc_error(exc, source) from exc


def filesystem_app(service: FilesystemService) -> FilesystemASGIApplication:
    """The SDK's generated ASGI application around ``service``."""
    return FilesystemASGIApplication(service)
