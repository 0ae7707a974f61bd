"""Artifact stores: where a full result goes when its budget cuts it (C15).

Both stores return an :class:`~sandrail.core.ArtifactRef` with a short URI
(``artifact://`` plus 16 hex digits of the content's SHA-256), so the
reference costs the result only a few dozen bytes.

Both take an artifact whole (``write``) or piece by piece (``open`` gives a
writer: ``write(text)`` as often as needed, then ``commit()`` or ``abort()``).
The port streams a big command output through ``open``, so
:class:`DirectoryArtifactStore` never holds one whole in memory: pieces go
to a temporary file, hashed as they pass, and the file is renamed into place
on commit.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import stat
import tempfile
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from pathlib import Path
from typing import Any, Final

from sandrail.core import ArtifactRef

__all__ = ["ArtifactNotFoundError", "DirectoryArtifactStore", "MemoryArtifactStore"]

_SCHEME = "artifact://"
_NAME = re.compile(r"[0-9a-f]{16}")

STALE_TEMPORARY_SECONDS: Final = 3600
"""A temporary file of a :class:`DirectoryArtifactStore` older than this is
left over from a writer that could not remove it; the next store made on the
directory removes it."""


class ArtifactNotFoundError(KeyError):
    """No artifact under that URI (never written, or evicted)."""


def _uri(digest: str) -> str:
    return _SCHEME + digest[:16]


class MemoryArtifactStore:
    """Artifacts in a dict; for tests and short-lived harnesses."""

    def __init__(self) -> None:
        self._items: dict[str, tuple[str, str]] = {}
        self._lock = threading.Lock()

    def write(self, key: str, content: str, media_type: str) -> ArtifactRef:
        """Keep ``content`` whole and return its reference (URI from the content's
        SHA-256; the same content twice is one artifact). ``key`` is not used."""
        writer = self.open(key, media_type)
        writer.write(content)
        return writer.commit()

    def open(self, key: str, media_type: str) -> _MemoryWriter:
        """Begin an artifact written piece by piece (held in memory)."""
        return _MemoryWriter(self._keep, media_type)

    def _keep(self, uri: str, content: str, media_type: str) -> None:
        with self._lock:
            self._items[uri] = (content, media_type)

    def read(self, uri: str) -> str:
        """The content kept under ``uri``; :class:`ArtifactNotFoundError` if none."""
        with self._lock:
            try:
                return self._items[uri][0]
            except KeyError:
                raise ArtifactNotFoundError(uri) from None

    def __len__(self) -> int:
        return len(self._items)


class _MemoryWriter:
    def __init__(self, keep: Callable[[str, str, str], None], media_type: str) -> None:
        self._keep = keep
        self._media_type = media_type
        self._pieces: list[str] = []
        self._hash = hashlib.sha256()
        self._size = 0
        self._ended = False

    def write(self, text: str) -> None:
        if self._ended:
            raise ValueError("this artifact was already committed or aborted")
        data = text.encode("utf-8")
        self._hash.update(data)
        self._size += len(data)
        self._pieces.append(text)

    def commit(self) -> ArtifactRef:
        if self._ended:
            raise ValueError("this artifact was already committed or aborted")
        self._ended = True
        uri = _uri(self._hash.hexdigest())
        self._keep(uri, "".join(self._pieces), self._media_type)
        self._pieces = []
        return ArtifactRef(uri=uri, size_bytes=self._size, media_type=self._media_type)

    def abort(self) -> None:
        self._ended = True
        self._pieces = []


class DirectoryArtifactStore:
    """Artifacts as files in one directory, within a total size cap.

    Writing past ``max_total_bytes`` evicts the oldest artifacts first. An
    artifact larger than the cap on its own is refused with ``ValueError``
    (the port then reports the cut result without an artifact); a streamed
    one is refused as soon as it grows past the cap. Files are written
    atomically with mode 0600: into a temporary file (``.tmp-*``) renamed into
    place on commit and removed on abort. One that could not be removed (the
    directory was read-only when the writer was aborted) is removed by the
    next store made on the directory once an hour old. Only regular files
    count: a link in the directory is never followed, swept or read.
    """

    def __init__(self, directory: str | os.PathLike[str], *, max_total_bytes: int = 256 * 2**20):
        if (
            isinstance(max_total_bytes, bool)
            or not isinstance(max_total_bytes, int)
            or max_total_bytes < 1
        ):
            raise ValueError(f"max_total_bytes must be a positive integer, got {max_total_bytes!r}")
        self._dir = Path(directory)
        self._dir.mkdir(parents=True, exist_ok=True)
        self._cap = max_total_bytes
        self._lock = threading.Lock()
        self._sizes: OrderedDict[str, int] = OrderedDict()
        self._sweep()
        existing = []
        for path in self._dir.glob("*.artifact"):
            with contextlib.suppress(OSError):
                found = path.lstat()
                if stat.S_ISREG(found.st_mode):  # an artifact is a file, never a link
                    existing.append((found.st_mtime_ns, path.stem, found.st_size))
        for _, name, size in sorted(existing):
            self._sizes[name] = size

    def _sweep(self) -> None:
        """Remove temporary files no writer has touched for
        :data:`STALE_TEMPORARY_SECONDS`: what a writer could not delete when
        it was aborted (the directory was read-only then) or a process that
        died mid-write left. A live writer touches its file at every piece."""
        stale = time.time() - STALE_TEMPORARY_SECONDS
        for path in self._dir.glob(".tmp-*"):
            with contextlib.suppress(OSError):  # gone already, or not ours to remove
                found = path.lstat()  # the file itself, never what a link points to
                if stat.S_ISREG(found.st_mode) and found.st_mtime < stale:
                    path.unlink()

    @property
    def total_bytes(self) -> int:
        """The bytes of every artifact the store now holds (at most ``max_total_bytes``)."""
        with self._lock:
            return sum(self._sizes.values())

    def write(self, key: str, content: str, media_type: str) -> ArtifactRef:
        """Keep ``content`` whole as a file, evicting the oldest artifacts beyond
        ``max_total_bytes``, and return its reference. Raises ``ValueError``,
        keeping nothing, when the content alone exceeds the cap; ``OSError``
        when the directory cannot be written. ``key`` is not used."""
        data = content.encode("utf-8")
        if len(data) > self._cap:
            raise ValueError(
                f"artifact of {len(data)} bytes exceeds the store's cap of {self._cap}"
            )
        writer = self.open(key, media_type)
        writer.write_bytes(data)  # aborts the writer itself if it fails
        return writer.commit()

    def open(self, key: str, media_type: str) -> _FileWriter:
        """Begin an artifact written piece by piece to a temporary file in
        the directory; ``commit()`` renames it into place."""
        fd, tmp = tempfile.mkstemp(dir=self._dir, prefix=".tmp-")
        os.fchmod(fd, 0o600)
        return _FileWriter(self, os.fdopen(fd, "wb"), Path(tmp), media_type)

    def _install(self, tmp: Path, digest: str, size: int) -> str:
        """Move a written temporary file into place as the artifact ``digest``
        names, evicting the oldest artifacts to stay within the cap; its URI."""
        uri = _uri(digest)
        name = uri.removeprefix(_SCHEME)
        with self._lock:
            if name in self._sizes:
                self._sizes.move_to_end(name)
                tmp.unlink(missing_ok=True)  # the same content is already kept
                return uri
            while self._sizes and sum(self._sizes.values()) + size > self._cap:
                oldest, _ = self._sizes.popitem(last=False)
                (self._dir / f"{oldest}.artifact").unlink(missing_ok=True)
            os.replace(tmp, self._dir / f"{name}.artifact")
            self._sizes[name] = size
        return uri

    def read(self, uri: str) -> str:
        """The content of the artifact ``uri`` names. Raises
        :class:`ArtifactNotFoundError` for a URI this store never made, an
        evicted artifact, or a file that is not a regular file (a link or a
        FIFO is never followed or read)."""
        name = uri.removeprefix(_SCHEME)
        if not uri.startswith(_SCHEME) or not _NAME.fullmatch(name):
            raise ArtifactNotFoundError(uri)
        flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK  # no link, no waiting on a FIFO
        try:
            fd = os.open(self._dir / f"{name}.artifact", flags)
        except OSError:
            raise ArtifactNotFoundError(uri) from None
        with os.fdopen(fd, "rb") as handle:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                raise ArtifactNotFoundError(uri)  # only regular files are artifacts
            return handle.read().decode("utf-8")


class _FileWriter:
    """One artifact being written to a temporary file of its store."""

    def __init__(
        self, store: DirectoryArtifactStore, handle: Any, tmp: Path, media_type: str
    ) -> None:
        self._store = store
        self._handle = handle
        self._tmp = tmp
        self._media_type = media_type
        self._hash = hashlib.sha256()
        self._size = 0
        self._ended = False

    def write(self, text: str) -> None:
        self.write_bytes(text.encode("utf-8"))

    def write_bytes(self, data: bytes) -> None:
        if self._ended:
            raise ValueError("this artifact was already committed or aborted")
        if self._size + len(data) > self._store._cap:
            self.abort()
            raise ValueError(
                f"artifact of over {self._size + len(data)} bytes exceeds the store's cap "
                f"of {self._store._cap}"
            )
        try:
            self._handle.write(data)
            self._handle.flush()  # on disk now: the file's age says the writer is alive
        except BaseException:
            self.abort()
            raise
        self._hash.update(data)
        self._size += len(data)

    def commit(self) -> ArtifactRef:
        if self._ended:
            raise ValueError("this artifact was already committed or aborted")
        self._ended = True
        try:
            written = os.fstat(self._handle.fileno())
            self._handle.close()
            found = self._tmp.lstat()
            if (found.st_dev, found.st_ino) != (written.st_dev, written.st_ino):
                raise FileNotFoundError(f"{self._tmp} is no longer the file this writer wrote")
            uri = self._store._install(self._tmp, self._hash.hexdigest(), self._size)
        except BaseException:
            self._tmp.unlink(missing_ok=True)
            raise
        return ArtifactRef(uri=uri, size_bytes=self._size, media_type=self._media_type)

    def abort(self) -> None:
        if self._ended:
            return
        self._ended = True
        try:
            self._handle.close()
        finally:
            self._tmp.unlink(missing_ok=True)
