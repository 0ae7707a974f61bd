"""Directory watches, as envd makes them: inotify with the semantics of the
fsnotify fork envd uses (``e2b-dev/fsnotify``), events named relative to the
watched directory, optionally recursive and with entry info.

Events: inotify ``CREATE``/``MOVED_TO`` are ``CREATE``, ``MOVED_FROM`` and a
watched directory's ``MOVE_SELF`` are ``RENAME``, ``ATTRIB`` is ``CHMOD``,
``MODIFY`` is ``WRITE``, ``DELETE``/``DELETE_SELF`` are ``REMOVE``; one
inotify event with several of these gives one envd event per kind, in
envd's order (create, rename, chmod, write, remove). With ``include_entry``
a create, write or chmod event carries the entry's info when the path still
exists. A recursive watch watches every directory below too, and each new
one as its creation is seen (what a command creates inside a directory in
the moment before that is not seen, as under envd).

Strategy: each watch is an inotify descriptor the event loop reads; paths
are reached inside the sandbox (``FsView``, ``/proc/self/fd/N``), so a watch
sees the sandbox's own ``/tmp`` and ``/home/user``. The server also drains
every watch of a sandbox (:meth:`Watcher.pump`) before answering any of its
file requests, so a change made through the API is in a watch's events
before the API says it is done.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import os
import posixpath
import stat as stat_module
from collections import deque
from collections.abc import Callable

import attrs
from connectrpc.code import Code
from e2b.envd.filesystem import filesystem_pb as pb
from inotify_simple import INotify
from inotify_simple import flags as inflags

from ._fsview import Entry, FsView

__all__ = ["MAX_SERVER_WATCHES", "MAX_WATCHES", "Emit", "WatchError", "Watcher", "on_network_mount"]

MAX_WATCHES = 16
"""The most watches (streamed and polled) one sandbox may hold at once.
Each is an inotify instance, and those are counted per host user (128 for
root by default), shared with every process of that user on this machine."""

MAX_SERVER_WATCHES = 64
"""The most watches the whole server holds at once (half of root's default
inotify instances, so the rest of this machine keeps some)."""

_MASK = (
    inflags.CREATE
    | inflags.MODIFY
    | inflags.DELETE
    | inflags.DELETE_SELF
    | inflags.MOVED_TO
    | inflags.MOVED_FROM
    | inflags.MOVE_SELF
    | inflags.ATTRIB
)
_ORDER = (
    (inflags.CREATE | inflags.MOVED_TO, pb.EventType.CREATE),
    (inflags.MOVE_SELF | inflags.MOVED_FROM, pb.EventType.RENAME),
    (inflags.ATTRIB, pb.EventType.CHMOD),
    (inflags.MODIFY, pb.EventType.WRITE),
    (inflags.DELETE | inflags.DELETE_SELF, pb.EventType.REMOVE),
)
_CARRIES_ENTRY = {pb.EventType.CREATE, pb.EventType.WRITE, pb.EventType.CHMOD}


class WatchError(Exception):
    """The watch ended on its own: the kernel's event queue overflowed
    (``INTERNAL``, as envd) or the sandbox ended (``UNAVAILABLE``)."""

    def __init__(self, message: str, code: Code = Code.INTERNAL) -> None:
        super().__init__(message)
        self.code = code


# Linux's magic numbers of the filesystems envd will not watch unasked.
_NETWORK_FILESYSTEMS = {0x6969, 0xFF534D42, 0x517B, 0xFE534D42, 0x65735546}
_libc = ctypes.CDLL(None, use_errno=True)


def on_network_mount(files: FsView, path: str) -> bool:
    """Whether ``path`` lies on NFS, CIFS, SMB or FUSE (``fstatfs``'s
    ``f_type``), as envd checks before a watch."""
    buffer = ctypes.create_string_buffer(256)  # struct statfs, f_type first
    fd = files.open(path, os.O_PATH)
    try:
        if _libc.fstatfs(fd, buffer) != 0:
            return False
    finally:
        os.close(fd)
    kind = ctypes.c_long.from_buffer(buffer).value & 0xFFFFFFFF
    return kind in _NETWORK_FILESYSTEMS


@attrs.define
class _Watch:
    wd: int
    path: str
    recurse: bool
    by_user: bool


Emit = Callable[[pb.FilesystemEvent], None]
ToEntry = Callable[[Entry], pb.EntryInfo]


class Watcher:
    """One watch of directory ``path`` (absolute, inside the sandbox of
    ``files``). :meth:`start` it, then each event goes to ``emit``; a broken
    watch sets :attr:`error` and calls ``on_error``. :meth:`close` ends it."""

    open = 0
    """Watches of this process not yet closed."""

    def __init__(
        self,
        files: FsView,
        path: str,
        *,
        recursive: bool,
        include_entry: bool,
        to_entry: ToEntry,
        emit: Emit,
        on_error: Callable[[WatchError], None] = lambda error: None,
    ) -> None:
        self._files = files
        self.path = path
        self._recursive = recursive
        self._include_entry = include_entry
        self._to_entry = to_entry
        self._emit = emit
        self._on_error = on_error
        self._inotify = INotify(nonblocking=True)
        Watcher.open += 1
        self._by_wd: dict[int, _Watch] = {}
        self._by_path: dict[str, int] = {}
        self._cookies: deque[tuple[int, str]] = deque(maxlen=10)
        self._loop: asyncio.AbstractEventLoop | None = None
        self.error: WatchError | None = None

    def _register(self, path: str, recurse: bool, by_user: bool) -> None:
        fd = self._files.open(path, os.O_PATH | os.O_DIRECTORY)
        try:
            wd = self._inotify.add_watch(f"/proc/self/fd/{fd}", _MASK)
        finally:
            os.close(fd)
        if wd in self._by_wd:  # the same directory reached twice
            return
        self._by_wd[wd] = _Watch(wd, path, recurse, by_user)
        self._by_path[path] = wd

    def _add_tree(self, path: str) -> None:
        self._register(path, True, True)
        pending = [path]
        while pending:
            directory = pending.pop()
            try:
                fd = self._files.open(directory, os.O_RDONLY | os.O_DIRECTORY)
            except OSError:
                continue  # gone meanwhile (a process's directory under /proc, say)
            try:
                children = [name for name in sorted(os.listdir(fd)) if _is_dir(fd, name)]
            finally:
                os.close(fd)
            for name in children:
                child = posixpath.join(directory, name)
                try:
                    self._register(child, True, False)
                except OSError:
                    continue  # gone meanwhile
                pending.append(child)

    async def start(self) -> None:
        """Watch the directory (and, recursive, every directory below it,
        walked off the event loop); raises ``OSError`` if it cannot."""
        if self._recursive:
            await asyncio.to_thread(self._add_tree, self.path)
        else:
            self._register(self.path, False, True)
        self._loop = asyncio.get_running_loop()
        self._loop.add_reader(self._inotify.fileno(), self.pump)

    def close(self, reason: WatchError | None = None) -> None:
        """Stop watching; with a ``reason``, the watch ended on its own
        (:attr:`error`, ``on_error``). Idempotent."""
        if self._inotify.closed:
            return
        if self._loop is not None:
            self._loop.remove_reader(self._inotify.fileno())
        self._inotify.close()
        Watcher.open -= 1
        if reason is not None:
            self.error = reason
            self._on_error(reason)

    def pump(self) -> None:
        """Handle every event the kernel has queued so far; never blocks."""
        if self._inotify.closed or self.error is not None:
            return
        for event in self._inotify.read(timeout=0):
            if event.mask & inflags.Q_OVERFLOW:
                self.close(WatchError("watcher error: fsnotify: queue or buffer overflow"))
                return
            self._handle(event.wd, event.mask, event.cookie, event.name)

    def _forget(self, watch: _Watch) -> None:
        self._by_wd.pop(watch.wd, None)
        if self._by_path.get(watch.path) == watch.wd:
            del self._by_path[watch.path]

    def _remove_tree(self, path: str) -> None:
        for watch in list(self._by_wd.values()):
            if watch.path == path or watch.path.startswith(path + "/"):
                self._forget(watch)
                with contextlib.suppress(OSError):  # the kernel dropped it already
                    self._inotify.rm_watch(watch.wd)

    def _handle(self, wd: int, mask: int, cookie: int, name: str) -> None:
        # Strategy: a line-by-line port of fsnotify's inotify handleEvent.
        watch = self._by_wd.get(wd)
        if watch is None:
            return
        full = watch.path + "/" + name if name else watch.path
        if mask & (inflags.IGNORED | inflags.UNMOUNT):
            self._forget(watch)
            return
        if mask & inflags.DELETE_SELF:
            self._forget(watch)
        if mask & inflags.MOVE_SELF:
            if watch.recurse and not watch.by_user:
                return
            self._remove_tree(watch.path)
            if watch.recurse:
                self._send(watch.path, [pb.EventType.RENAME])
                return
        if mask & inflags.DELETE_SELF and posixpath.dirname(watch.path) in self._by_path:
            return
        renamed_from = ""
        if cookie and mask & inflags.MOVED_FROM:
            self._cookies.append((cookie, full))
        elif cookie and mask & inflags.MOVED_TO:
            renamed_from = next((path for c, path in self._cookies if c == cookie), "")
        ops = [kind for bits, kind in _ORDER if mask & bits]
        if watch.recurse and mask & inflags.ISDIR and pb.EventType.CREATE in ops:
            with contextlib.suppress(OSError):  # gone already
                self._register(full, True, False)
            if renamed_from:
                for other in self._by_wd.values():
                    if other.path.startswith(renamed_from + "/"):
                        del self._by_path[other.path]
                        other.path = full + other.path[len(renamed_from) :]
                        self._by_path[other.path] = other.wd
        self._send(full, ops)

    def _send(self, full: str, ops: list[pb.EventType]) -> None:
        relative = posixpath.relpath(full, self.path)
        for kind in ops:
            event = pb.FilesystemEvent(name=relative, type=kind)
            if self._include_entry and kind in _CARRIES_ENTRY:
                with contextlib.suppress(OSError):  # best effort, as envd: it is gone
                    event.entry = self._to_entry(self._files.entry(full))
            self._emit(event)


def _is_dir(fd: int, name: str) -> bool:
    try:
        return stat_module.S_ISDIR(os.stat(name, dir_fd=fd, follow_symlinks=False).st_mode)
    except OSError:
        return False
