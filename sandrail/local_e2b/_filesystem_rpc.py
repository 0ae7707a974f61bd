"""envd's ``filesystem.Filesystem`` service (the RPCs behind the SDK's
``files.list``, ``exists``, ``get_info``, ``make_dir``, ``remove`` and
``rename``), served by the SDK's generated ``FilesystemASGIApplication``.

Paths are expanded as envd does (relative to the requesting user's home)
and resolved inside the sandbox (``_fsview``). Errors map to the codes the
SDK branches on: NOT_FOUND (``FileNotFoundException``, ``exists`` → False),
ALREADY_EXISTS (``make_dir`` → False). Directory watches (streamed
``WatchDir``, polled ``CreateWatcher``) are bounded per sandbox and per
server (``_watch``); a streamed one ends when its client goes away
(``_envd``), a polled one when removed or with its sandbox.
"""

from __future__ import annotations

import asyncio
import errno
import secrets
import stat as stat_module
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

from connectrpc.code import Code
from connectrpc.errors import ConnectError
from e2b.envd.filesystem import filesystem_pb as pb
from e2b.envd.filesystem.filesystem_connect import Filesystem, FilesystemASGIApplication
from protobuf import Oneof
from protobuf.wkt.google.protobuf.timestamp_pb import Timestamp

from ._fsview import Entry, expand_path
from ._json_guard import guarded_codecs
from ._process_rpc import CURRENT_SANDBOX, CURRENT_USER, keepalive_interval
from ._watch import MAX_SERVER_WATCHES, MAX_WATCHES, Emit, Watcher, WatchError, on_network_mount

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
    errno.EBUSY: Code.FAILED_PRECONDITION,
    errno.ELOOP: Code.FAILED_PRECONDITION,
    errno.EACCES: Code.PERMISSION_DENIED,
    errno.EPERM: Code.PERMISSION_DENIED,
    errno.EROFS: Code.PERMISSION_DENIED,
    errno.EXDEV: Code.INVALID_ARGUMENT,
    errno.ENAMETOOLONG: Code.INVALID_ARGUMENT,
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
    """The ``filesystem.Filesystem`` service of every sandbox.
    ``keepalive_seconds`` overrides the client's ``Keepalive-Ping-Interval``
    on watch streams."""

    def __init__(self, keepalive_seconds: float | None = None) -> None:
        self._keepalive = keepalive_seconds

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

    async def _watcher(
        self,
        raw: str,
        *,
        recursive: bool,
        include_entry: bool,
        allow_network_mounts: bool,
        emit: Emit,
        on_error: Callable[[WatchError], None],
    ) -> Watcher:
        """A started watch of directory ``raw``, refused as envd refuses it."""
        path = _path(raw)
        sandbox = CURRENT_SANDBOX.get()
        if len(sandbox.watches) >= MAX_WATCHES:
            raise ConnectError(
                Code.RESOURCE_EXHAUSTED,
                f"local-e2b allows at most {MAX_WATCHES} watches per sandbox at once; "
                "stop one first",
            )
        if Watcher.open >= MAX_SERVER_WATCHES:
            raise ConnectError(
                Code.RESOURCE_EXHAUSTED,
                f"local-e2b allows at most {MAX_SERVER_WATCHES} watches at once on this "
                "server; stop one first",
            )
        files = sandbox.files
        try:
            is_dir = stat_module.S_ISDIR(files.stat(path).st_mode)
        except FileNotFoundError as exc:
            raise ConnectError(Code.NOT_FOUND, f"path {path} not found: {exc}") from exc
        except OSError as exc:
            raise ConnectError(Code.INTERNAL, f"error statting path {path}: {exc}") from exc
        if not is_dir:
            raise ConnectError(Code.INVALID_ARGUMENT, f"path {path} not a directory")
        if not allow_network_mounts and on_network_mount(files, path):
            raise ConnectError(
                Code.INVALID_ARGUMENT, f"cannot watch path on network filesystem: {path}"
            )
        try:
            watcher = Watcher(
                files,
                path,
                recursive=recursive,
                include_entry=include_entry,
                to_entry=_entry,
                emit=emit,
                on_error=on_error,
            )
        except OSError as exc:  # EMFILE: this machine's inotify instances are all taken
            raise ConnectError(
                Code.RESOURCE_EXHAUSTED, f"cannot watch {path} on this machine now: {exc}"
            ) from exc
        try:
            await watcher.start()
        except OSError as exc:
            watcher.close()
            raise ConnectError(
                Code.INTERNAL, f"error adding path {path} to watcher: {exc}"
            ) from exc
        return watcher

    async def watch_dir(
        self, request: pb.WatchDirRequest, ctx: Any, /
    ) -> AsyncIterator[pb.WatchDirResponse]:
        sandbox = CURRENT_SANDBOX.get()
        queue: asyncio.Queue[pb.FilesystemEvent | WatchError] = asyncio.Queue()
        watcher = await self._watcher(
            request.path,
            recursive=request.recursive,
            include_entry=request.include_entry,
            allow_network_mounts=request.allow_network_mounts,
            emit=queue.put_nowait,
            on_error=queue.put_nowait,
        )
        sandbox.watches.add(watcher)
        keepalive = keepalive_interval(ctx, self._keepalive)
        deadline = None if ctx.timeout_ms is None else time.monotonic() + ctx.timeout_ms / 1000
        try:
            start: Any = Oneof("start", pb.WatchDirResponse.StartEvent())
            yield pb.WatchDirResponse(event=start)
            while True:
                wait = (
                    keepalive if deadline is None else min(keepalive, deadline - time.monotonic())
                )
                try:
                    item = await asyncio.wait_for(queue.get(), max(0.0, wait))
                except TimeoutError:
                    if deadline is not None and time.monotonic() >= deadline:
                        raise ConnectError(
                            Code.DEADLINE_EXCEEDED, "the watch's deadline passed"
                        ) from None
                    keep: Any = Oneof("keepalive", pb.WatchDirResponse.KeepAlive())
                    yield pb.WatchDirResponse(event=keep)
                    continue
                if isinstance(item, WatchError):
                    raise ConnectError(item.code, str(item))
                change: Any = Oneof("filesystem", item)
                yield pb.WatchDirResponse(event=change)
        finally:
            watcher.close()
            sandbox.watches.discard(watcher)

    async def create_watcher(
        self, request: pb.CreateWatcherRequest, ctx: Any, /
    ) -> pb.CreateWatcherResponse:
        sandbox = CURRENT_SANDBOX.get()
        events: list[pb.FilesystemEvent] = []
        watcher = await self._watcher(
            request.path,
            recursive=request.recursive,
            include_entry=request.include_entry,
            allow_network_mounts=request.allow_network_mounts,
            emit=events.append,
            on_error=lambda error: None,  # kept in ``watcher.error``
        )
        watcher_id = "w" + secrets.token_hex(8)
        sandbox.polled_watches[watcher_id] = (watcher, events)
        sandbox.watches.add(watcher)
        return pb.CreateWatcherResponse(watcher_id=watcher_id)

    def _polled(self, watcher_id: str) -> tuple[Watcher, list[pb.FilesystemEvent]]:
        found = CURRENT_SANDBOX.get().polled_watches.get(watcher_id)
        if found is None:
            raise ConnectError(Code.NOT_FOUND, f"watcher with id {watcher_id} not found")
        return found

    async def get_watcher_events(
        self, request: pb.GetWatcherEventsRequest, ctx: Any, /
    ) -> pb.GetWatcherEventsResponse:
        watcher, events = self._polled(request.watcher_id)
        watcher.pump()
        if watcher.error is not None:
            raise ConnectError(watcher.error.code, str(watcher.error))
        taken = list(events)
        events.clear()
        return pb.GetWatcherEventsResponse(events=taken)

    async def remove_watcher(
        self, request: pb.RemoveWatcherRequest, ctx: Any, /
    ) -> pb.RemoveWatcherResponse:
        watcher, _ = self._polled(request.watcher_id)
        watcher.close()
        sandbox = CURRENT_SANDBOX.get()
        sandbox.polled_watches.pop(request.watcher_id, None)
        sandbox.watches.discard(watcher)
        return pb.RemoveWatcherResponse()


def filesystem_app(service: FilesystemService) -> FilesystemASGIApplication:
    """The SDK's generated ASGI application around ``service``."""
    return FilesystemASGIApplication(service, codecs=guarded_codecs())
