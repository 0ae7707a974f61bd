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

Entries are described as envd describes them (``GetEntryInfo``): from the
path itself (``lstat``: name, size, permissions, owner, times), but a
symbolic link reports the type and permission bits of what it points to and,
as its target, the absolute path it resolves to (every link on the way
followed, inside the sandbox); permissions read as Go's ``FileMode`` prints
them (``dtrwxrwxrwx`` for ``/tmp``, ``Lrwxrwxrwx`` for a link); metadata is
the file's ``user.e2b.*`` extended attributes (``_metadata``).
"""

from __future__ import annotations

import ctypes
import errno
import grp
import os
import posixpath
import pwd
import re
import shutil
import stat as stat_module
from collections.abc import Iterator, Mapping
from contextlib import contextmanager

import attrs

from ._metadata import read_metadata

__all__ = ["Entry", "FsView", "expand_path", "go_permissions"]

_MAX_LINKS = 255

_SYS_OPENAT2 = 437
_RESOLVE_NO_MAGICLINKS = 0x02
_RESOLVE_IN_ROOT = 0x10
_libc = ctypes.CDLL(None, use_errno=True)


class _OpenHow(ctypes.Structure):
    _fields_ = (("flags", ctypes.c_uint64), ("mode", ctypes.c_uint64), ("resolve", ctypes.c_uint64))


def expand_path(path: str, home: str) -> str:
    """A request path made absolute as envd does: empty means the user's
    home, ``~`` and ``~/x`` expand to it, a relative path is taken from it;
    the result is normalised. ``ValueError`` for ``~other`` or a NUL."""
    if "\0" in path:
        raise ValueError(f"a path cannot hold a NUL byte: {path!r}")
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
    metadata: Mapping[str, str] | None = None


_GO_TYPES = (
    (stat_module.S_IFDIR, "d"),
    (stat_module.S_IFLNK, "L"),
    (stat_module.S_IFBLK, "D"),
    (stat_module.S_IFCHR, "Dc"),
    (stat_module.S_IFIFO, "p"),
    (stat_module.S_IFSOCK, "S"),
)


def go_permissions(mode: int) -> str:
    """``mode`` (``st_mode``) as Go's ``os.FileMode.String()`` prints it,
    which is what envd reports: type letters in Go's order
    (``dalTLDpSugct?``), then ``rwx`` bits; ``-`` when there are no letters."""
    kind = stat_module.S_IFMT(mode)
    letters = dict(_GO_TYPES).get(kind, "")
    flags = ""
    if mode & stat_module.S_ISUID:
        flags += "u"
    if mode & stat_module.S_ISGID:
        flags += "g"
    # Go's order: d, L, D, p, S, u, g, c, t.
    head = letters.replace("c", "") + flags + ("c" if "c" in letters else "")
    if mode & stat_module.S_ISVTX:
        head += "t"
    bits = "".join(
        char if mode & (1 << (8 - index)) else "-" for index, char in enumerate("rwxrwxrwx")
    )
    return (head or "-") + bits


class FsView:
    """File operations in one sandbox's view. ``root_fd`` is an ``O_PATH``
    descriptor of the sandbox's ``/``; ``names`` maps uids and gids the
    sandbox knows to their names there."""

    def __init__(
        self, root_fd: int, names: Mapping[int, str], mountinfo: str | None = None
    ) -> None:
        self._root = root_fd
        self._names = dict(names)
        self._mountinfo = mountinfo
        """``/proc/<pid>/mountinfo`` of a process in the sandbox."""

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
                    try:
                        os.mkdir(name, 0o755, dir_fd=fd)
                    except FileExistsError:
                        raise _dangling(current) from None
                    os.chown(name, uid, gid, dir_fd=fd, follow_symlinks=False)
                continue
            if not stat_module.S_ISDIR(info.st_mode):
                raise NotADirectoryError(errno.ENOTDIR, "path is a file", current)

    def check_writable(self, path: str) -> None:
        """Raise what :meth:`create_file` would for ``path``, changing
        nothing: ``IsADirectoryError``, ``OSError(EINVAL)`` (not a regular
        file), ``NotADirectoryError`` (a parent is a file, or a symbolic
        link to a missing directory)."""
        try:
            info = self.stat(path)
        except FileNotFoundError:
            info = None
        if info is not None:
            if stat_module.S_ISDIR(info.st_mode):
                raise IsADirectoryError(errno.EISDIR, "path is a directory", path)
            if not stat_module.S_ISREG(info.st_mode):
                raise OSError(errno.EINVAL, "not a regular file", path)
            return
        current = "/"
        for part in [part for part in posixpath.dirname(path).split("/") if part]:
            current = posixpath.join(current, part)
            try:
                found = self.stat(current)
            except FileNotFoundError:
                with self.parent(current) as (fd, name):
                    try:
                        os.stat(name, dir_fd=fd, follow_symlinks=False)
                    except FileNotFoundError:
                        return  # from here on, create_file makes the directories
                raise _dangling(current) from None
            if not stat_module.S_ISDIR(found.st_mode):
                raise NotADirectoryError(errno.ENOTDIR, "path is a file", current)

    def create_file(self, path: str, uid: int, gid: int) -> int:
        """Open ``path`` for writing (created or truncated, parents made),
        owned by ``uid``:``gid``; returns the descriptor.
        ``IsADirectoryError`` if it is a directory, ``OSError(EINVAL)`` if
        it is not a regular file (a FIFO must not stall the server).

        envd's order, for the same inotify events: an existing file is
        handed over first, then truncated (ATTRIB, MODIFY); a new one is
        created, then handed over (CREATE, ATTRIB)."""
        self.ensure_dirs(posixpath.dirname(path), uid, gid)
        try:
            info: os.stat_result | None = self.stat(path)
        except FileNotFoundError:
            info = None
        if info is not None and stat_module.S_ISDIR(info.st_mode):
            raise IsADirectoryError(errno.EISDIR, "path is a directory", path)
        if info is not None and not stat_module.S_ISREG(info.st_mode):
            raise OSError(errno.EINVAL, "not a regular file", path)
        if info is not None:
            with self._fd(path, os.O_PATH) as existing:
                os.chown(f"/proc/self/fd/{existing}", uid, gid)
        flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NONBLOCK
        fd = self.open(path, flags, 0o644)
        if not stat_module.S_ISREG(os.fstat(fd).st_mode):
            os.close(fd)
            raise OSError(errno.EINVAL, "not a regular file", path)
        os.set_blocking(fd, True)
        if info is None:
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
        """Remove a file, a link or a whole directory tree; absent is fine.
        All or nothing: a tree that is or holds a mount point of the
        sandbox (``/tmp``, ``/home``, a read-only part of this machine)
        cannot be removed whole, so it is refused (``OSError(EBUSY)``)
        before anything in it is touched."""
        with self.parent(path) as (fd, name):
            try:
                info = os.stat(name, dir_fd=fd, follow_symlinks=False)
            except FileNotFoundError:
                return
            if stat_module.S_ISDIR(info.st_mode):
                real = posixpath.join(self.resolve(posixpath.dirname(path)), name)
                points = self._mount_points()
                # The path itself first: a mount hidden under it is less telling.
                for point in sorted(points, key=lambda point: point != real):
                    if point == real or point.startswith(real.rstrip("/") + "/"):
                        raise OSError(
                            errno.EBUSY,
                            f"cannot remove {path}: {point} is a mount point of the sandbox "
                            "(local-e2b lays its own directories and this machine's over "
                            "it); nothing was removed",
                            path,
                        )
                shutil.rmtree(name, dir_fd=fd)
            else:
                os.unlink(name, dir_fd=fd)

    def _mount_points(self) -> list[str]:
        if self._mountinfo is None:
            return []
        with open(self._mountinfo, encoding="utf-8") as mountinfo:
            return [_unescape(line.split()[4]) for line in mountinfo if line.strip()]

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

    def resolve(self, path: str) -> str:
        """``path`` with every symbolic link on it followed, inside the
        sandbox (Go's ``filepath.EvalSymlinks``): ``FileNotFoundError`` if a
        part is missing, ``OSError(ELOOP)`` after 255 links."""
        done, links = "/", 0
        rest = [part for part in path.split("/") if part]
        while rest:
            part = rest.pop(0)
            if part == ".":
                continue
            if part == "..":
                done = posixpath.dirname(done)
                continue
            candidate = posixpath.join(done, part)
            with self.parent(candidate) as (fd, name):
                info = os.stat(name, dir_fd=fd, follow_symlinks=False)
                target = os.readlink(name, dir_fd=fd) if stat_module.S_ISLNK(info.st_mode) else None
            if target is None:
                done = candidate
                continue
            links += 1
            if links > _MAX_LINKS:
                raise OSError(errno.ELOOP, "too many links", path)
            if target.startswith("/"):
                done = "/"
            rest[:0] = [part for part in target.split("/") if part]
        return done

    def metadata(self, path: str) -> Mapping[str, str] | None:
        """The metadata of ``path`` (links followed), ``None`` if none or
        unreadable (best effort, as envd)."""
        try:
            fd = self.open(path, os.O_PATH)
        except OSError:
            return None
        try:
            return read_metadata(f"/proc/self/fd/{fd}")
        finally:
            os.close(fd)

    def entry(self, path: str) -> Entry:
        """What ``path`` is (see the module doc); raises ``OSError``
        (``FileNotFoundError``...)."""
        with self.parent(path) if path != "/" else _root_parent(self._root) as (fd, name):
            info = os.stat(name, dir_fd=fd, follow_symlinks=False)
        return self._entry(path, info)

    def _entry(self, path: str, info: os.stat_result) -> Entry:
        kind_of = info.st_mode
        target = None
        if stat_module.S_ISLNK(info.st_mode):
            try:
                target = self.resolve(path)
            except OSError:
                target = path  # envd: an unresolvable link's target is itself
            try:
                kind_of = self.stat(target).st_mode
            except OSError:
                kind_of = 0  # what it points to is unknown: no type, no bits
        kind = (
            "dir"
            if stat_module.S_ISDIR(kind_of)
            else "file"
            if stat_module.S_ISREG(kind_of)
            else "other"
        )
        return Entry(
            name=posixpath.basename(path) or "/",
            path=path,
            kind=kind,
            is_symlink=target is not None,
            size=info.st_size,
            mode=kind_of & 0o777,
            permissions=go_permissions(info.st_mode),
            owner=self._name(info.st_uid),
            group=self._name(info.st_gid, group=True),
            modified_ns=info.st_mtime_ns,
            symlink_target=target,
            metadata=self.metadata(path),
        )

    def _name(self, number: int, group: bool = False) -> str:
        if number in self._names:
            return self._names[number]
        try:
            return grp.getgrgid(number).gr_name if group else pwd.getpwuid(number).pw_name
        except KeyError:
            return str(number)

    def list_dir(self, path: str, depth: int) -> list[Entry]:
        """Entries under directory ``path`` (links on it followed) down to
        ``depth`` levels, not following links below it, each named under
        ``path`` as asked. ``NotADirectoryError`` if it is not one."""
        resolved = self.resolve(path)
        if not stat_module.S_ISDIR(self.stat(resolved).st_mode):
            raise NotADirectoryError(errno.ENOTDIR, "path is not a directory", path)
        entries: list[Entry] = []
        self._walk(resolved, path, depth, entries)
        return entries

    def _walk(self, real: str, shown: str, depth: int, into: list[Entry]) -> None:
        with self._fd(real, os.O_RDONLY | os.O_DIRECTORY) as fd:
            found = []
            for name in sorted(os.listdir(fd)):
                try:
                    found.append((name, os.stat(name, dir_fd=fd, follow_symlinks=False)))
                except OSError:
                    continue  # gone meanwhile: envd skips it too
        for name, info in found:
            entry = self._entry(posixpath.join(real, name), info)
            into.append(attrs.evolve(entry, path=posixpath.join(shown, name)))
            if depth > 1 and stat_module.S_ISDIR(info.st_mode):
                self._walk(posixpath.join(real, name), posixpath.join(shown, name), depth - 1, into)


def _unescape(field: str) -> str:
    """A mountinfo path: spaces and the like are written as octal escapes."""
    return re.sub(r"\\([0-7]{3})", lambda match: chr(int(match.group(1), 8)), field)


def _dangling(path: str) -> NotADirectoryError:
    return NotADirectoryError(
        errno.ENOTDIR, f"{path} is a symbolic link to a directory that does not exist", path
    )


@contextmanager
def _root_parent(root_fd: int) -> Iterator[tuple[int, str]]:
    yield root_fd, "."
