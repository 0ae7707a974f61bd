"""A sandbox's filesystem as its commands see it, for the file API.

Strategy: every path is resolved with ``openat2(RESOLVE_IN_ROOT)`` against
``/proc/<anchor>/root`` (an ``O_PATH`` descriptor of the sandbox's root). The
walk runs in the sandbox's mount namespace, so ``/tmp`` and ``/home/user``
are the sandbox's own, and every symlink and ``..`` is resolved inside the
sandbox's root: no path a client sends, no link a command planted, reaches a
file the sandbox's own ``root`` could not reach at that path. Operations on
the last component (mkdir, unlink, rename, lstat) go through the parent's
descriptor (``dir_fd``). Like envd, the file API acts as root and hands new
files and directories to the requesting user.
"""

from __future__ import annotations

import ctypes
import errno
import os
import posixpath
import pwd
import shutil
import stat as stat_module
from collections.abc import Iterator, Mapping
from contextlib import contextmanager

import attrs

__all__ = ["Entry", "FsView", "expand_path"]

_SYS_OPENAT2 = 437
_RESOLVE_NO_MAGICLINKS = 0x02
_RESOLVE_IN_ROOT = 0x10
_libc = ctypes.CDLL(None, use_errno=True)


class _OpenHow(ctypes.Structure):
    _fields_ = (("flags", ctypes.c_uint64), ("mode", ctypes.c_uint64), ("resolve", ctypes.c_uint64))


def expand_path(path: str, home: str) -> str:
    """A request path made absolute as envd does: empty means the user's
    home, ``~`` and ``~/x`` expand to it, a relative path is taken from it;
    the result is normalised. ``ValueError`` for ``~other``."""
    if path.startswith("~"):
        if len(path) > 1 and path[1] != "/":
            raise ValueError(f"cannot expand user-specific home dir in {path!r}")
        path = home + path[1:]
    if not path.startswith("/"):
        path = posixpath.join(home, path)
    return posixpath.normpath(path).replace("//", "/")


@attrs.frozen(kw_only=True)
class Entry:
    """What envd's ``EntryInfo`` says of one path."""

    name: str
    path: str
    kind: str  # "file", "dir", "symlink" or "other"
    is_symlink: bool
    size: int
    mode: int
    permissions: str
    owner: str
    group: str
    modified_ns: int
    symlink_target: str | None


class FsView:
    """File operations in one sandbox's view. ``root_fd`` is an ``O_PATH``
    descriptor of the sandbox's ``/``; ``names`` maps uids and gids the
    sandbox knows to their names there."""

    def __init__(self, root_fd: int, names: Mapping[int, str]) -> None:
        self._root = root_fd
        self._names = dict(names)

    def open(self, path: str, flags: int, mode: int = 0) -> int:
        """``openat2`` of absolute ``path`` inside the sandbox; raises ``OSError``."""
        how = _OpenHow(flags | os.O_CLOEXEC, mode, _RESOLVE_IN_ROOT | _RESOLVE_NO_MAGICLINKS)
        relative = path.lstrip("/") or "."
        fd = int(
            _libc.syscall(
                _SYS_OPENAT2, self._root, relative.encode(), ctypes.byref(how), ctypes.sizeof(how)
            )
        )
        if fd < 0:
            code = ctypes.get_errno()
            raise OSError(code, os.strerror(code), path)
        return fd

    @contextmanager
    def _fd(self, path: str, flags: int) -> Iterator[int]:
        fd = self.open(path, flags)
        try:
            yield fd
        finally:
            os.close(fd)

    @contextmanager
    def parent(self, path: str) -> Iterator[tuple[int, str]]:
        """The descriptor of ``path``'s directory and its last component."""
        directory, name = posixpath.split(path)
        if name in ("", ".", ".."):
            raise OSError(errno.EINVAL, "not a path to an entry", path)
        with self._fd(directory or "/", os.O_PATH | os.O_DIRECTORY) as fd:
            yield fd, name

    def stat(self, path: str) -> os.stat_result:
        """``stat`` following symlinks."""
        with self._fd(path, os.O_PATH) as fd:
            return os.fstat(fd)

    def exists(self, path: str) -> bool:
        try:
            self.stat(path)
        except FileNotFoundError:
            return False
        return True

    def ensure_dirs(self, path: str, uid: int, gid: int) -> None:
        """Create each missing directory of absolute ``path`` (0755, owned
        by ``uid``:``gid``), as envd's ``EnsureDirs``; ``NotADirectoryError``
        if one is a file."""
        current = "/"
        for part in [part for part in path.split("/") if part]:
            current = posixpath.join(current, part)
            try:
                info = self.stat(current)
            except FileNotFoundError:
                with self.parent(current) as (fd, name):
                    os.mkdir(name, 0o755, dir_fd=fd)
                    os.chown(name, uid, gid, dir_fd=fd, follow_symlinks=False)
                continue
            if not stat_module.S_ISDIR(info.st_mode):
                raise NotADirectoryError(errno.ENOTDIR, "path is a file", current)

    def create_file(self, path: str, uid: int, gid: int) -> int:
        """Open ``path`` for writing (created or truncated, parents made),
        owned by ``uid``:``gid``; returns the descriptor. ``IsADirectoryError``
        if it is a directory."""
        self.ensure_dirs(posixpath.dirname(path), uid, gid)
        if self.exists(path) and stat_module.S_ISDIR(self.stat(path).st_mode):
            raise IsADirectoryError(errno.EISDIR, "path is a directory", path)
        # O_NONBLOCK: a FIFO must not stall the server; only regular files are written.
        fd = self.open(path, os.O_WRONLY | os.O_CREAT | os.O_NONBLOCK, 0o644)
        if not stat_module.S_ISREG(os.fstat(fd).st_mode):
            os.close(fd)
            raise OSError(errno.EINVAL, "not a regular file", path)
        os.set_blocking(fd, True)
        os.ftruncate(fd, 0)
        os.fchown(fd, uid, gid)
        return fd

    def make_dir(self, path: str, uid: int, gid: int) -> None:
        """``FileExistsError`` if a directory is there; ``NotADirectoryError``
        if a file is; otherwise create it and its parents."""
        if self.exists(path):
            if stat_module.S_ISDIR(self.stat(path).st_mode):
                raise FileExistsError(errno.EEXIST, "directory already exists", path)
            raise NotADirectoryError(errno.ENOTDIR, "path exists but is not a directory", path)
        self.ensure_dirs(path, uid, gid)

    def remove(self, path: str) -> None:
        """Remove a file, a link or a whole directory tree; absent is fine."""
        with self.parent(path) as (fd, name):
            try:
                info = os.stat(name, dir_fd=fd, follow_symlinks=False)
            except FileNotFoundError:
                return
            if stat_module.S_ISDIR(info.st_mode):
                shutil.rmtree(name, dir_fd=fd)
            else:
                os.unlink(name, dir_fd=fd)

    def move(self, source: str, destination: str, uid: int, gid: int) -> None:
        """Rename ``source`` to ``destination``, making its parents."""
        self.ensure_dirs(posixpath.dirname(destination), uid, gid)
        with (
            self.parent(source) as (src_fd, src_name),
            self.parent(destination) as (
                dst_fd,
                dst_name,
            ),
        ):
            os.stat(src_name, dir_fd=src_fd, follow_symlinks=False)
            os.rename(src_name, dst_name, src_dir_fd=src_fd, dst_dir_fd=dst_fd)

    def entry(self, path: str) -> Entry:
        """What ``path`` is; raises ``OSError`` (``FileNotFoundError``...)."""
        with self.parent(path) if path != "/" else _root_parent(self._root) as (fd, name):
            info = os.stat(name, dir_fd=fd, follow_symlinks=False)
            target = os.readlink(name, dir_fd=fd) if stat_module.S_ISLNK(info.st_mode) else None
        shown = info
        if target is not None:
            try:
                shown = self.stat(path)
            except OSError:
                shown = info
        return self._entry(path, info, shown, target)

    def _entry(
        self, path: str, info: os.stat_result, shown: os.stat_result, target: str | None
    ) -> Entry:
        mode = shown.st_mode
        kind = (
            "dir"
            if stat_module.S_ISDIR(mode)
            else "file"
            if stat_module.S_ISREG(mode)
            else "symlink"
            if stat_module.S_ISLNK(mode)
            else "other"
        )
        return Entry(
            name=posixpath.basename(path) or "/",
            path=path,
            kind=kind,
            is_symlink=target is not None,
            size=info.st_size,
            mode=stat_module.S_IMODE(info.st_mode),
            permissions=stat_module.filemode(info.st_mode),
            owner=self._name(info.st_uid),
            group=self._name(info.st_gid, group=True),
            modified_ns=info.st_mtime_ns,
            symlink_target=target,
        )

    def _name(self, number: int, group: bool = False) -> str:
        if number in self._names:
            return self._names[number]
        if not group:
            try:
                return pwd.getpwuid(number).pw_name
            except KeyError:
                pass
        return str(number)

    def list_dir(self, path: str, depth: int) -> list[Entry]:
        """Entries under directory ``path`` down to ``depth`` levels, not
        following symlinks below it. ``NotADirectoryError`` if it is not one."""
        if not stat_module.S_ISDIR(self.stat(path).st_mode):
            raise NotADirectoryError(errno.ENOTDIR, "path is not a directory", path)
        entries: list[Entry] = []
        self._walk(path, depth, entries)
        return entries

    def _walk(self, path: str, depth: int, into: list[Entry]) -> None:
        with self._fd(path, os.O_RDONLY | os.O_DIRECTORY) as fd:
            names = sorted(os.listdir(fd))
            found = []
            for name in names:
                try:
                    info = os.stat(name, dir_fd=fd, follow_symlinks=False)
                    target = (
                        os.readlink(name, dir_fd=fd) if stat_module.S_ISLNK(info.st_mode) else None
                    )
                except OSError:
                    continue
                found.append((name, info, target))
        for name, info, target in found:
            child = posixpath.join(path, name)
            into.append(self._entry(child, info, info, target))
            if depth > 1 and stat_module.S_ISDIR(info.st_mode):
                self._walk(child, depth - 1, into)


@contextmanager
def _root_parent(root_fd: int) -> Iterator[tuple[int, str]]:
    yield root_fd, "."
