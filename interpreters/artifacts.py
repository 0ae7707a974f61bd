"""Artifact stores: where a full result goes when its budget cuts it (C15).

Both stores return an :class:`~sandrail.core.ArtifactRef` with a short URI
(``artifact://`` plus 16 hex digits of the content's SHA-256), so the
reference costs the result only a few dozen bytes.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
import threading
from collections import OrderedDict
from pathlib import Path

from sandrail.core import ArtifactRef

__all__ = ["ArtifactNotFoundError", "DirectoryArtifactStore", "MemoryArtifactStore"]

_SCHEME = "artifact://"


class ArtifactNotFoundError(KeyError):
    """No artifact under that URI (never written, or evicted)."""


def _uri(content: bytes) -> str:
    return _SCHEME + hashlib.sha256(content).hexdigest()[:16]


class MemoryArtifactStore:
    """Artifacts in a dict; for tests and short-lived harnesses."""

    def __init__(self) -> None:
        self._items: dict[str, tuple[str, str]] = {}
        self._lock = threading.Lock()

    def write(self, key: str, content: str, media_type: str) -> ArtifactRef:
        data = content.encode("utf-8")
        uri = _uri(data)
        with self._lock:
            self._items[uri] = (content, media_type)
        return ArtifactRef(uri=uri, size_bytes=len(data), media_type=media_type)

    def read(self, uri: str) -> str:
        with self._lock:
            try:
                return self._items[uri][0]
            except KeyError:
                raise ArtifactNotFoundError(uri) from None

    def __len__(self) -> int:
        return len(self._items)


class DirectoryArtifactStore:
    """Artifacts as files in one directory, within a total size cap.

    Writing past ``max_total_bytes`` evicts the oldest artifacts first. An
    artifact larger than the cap on its own is refused with ``ValueError``
    (the port then reports the cut result without an artifact). Files are
    written atomically with mode 0600.
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
        existing = sorted(self._dir.glob("*.artifact"), key=lambda p: p.stat().st_mtime_ns)
        for path in existing:
            self._sizes[path.stem] = path.stat().st_size

    @property
    def total_bytes(self) -> int:
        with self._lock:
            return sum(self._sizes.values())

    def write(self, key: str, content: str, media_type: str) -> ArtifactRef:
        data = content.encode("utf-8")
        if len(data) > self._cap:
            raise ValueError(
                f"artifact of {len(data)} bytes exceeds the store's cap of {self._cap}"
            )
        uri = _uri(data)
        name = uri.removeprefix(_SCHEME)
        with self._lock:
            if name in self._sizes:
                self._sizes.move_to_end(name)
            else:
                while self._sizes and sum(self._sizes.values()) + len(data) > self._cap:
                    oldest, _ = self._sizes.popitem(last=False)
                    (self._dir / f"{oldest}.artifact").unlink(missing_ok=True)
                fd, tmp = tempfile.mkstemp(dir=self._dir, prefix=".tmp-")
                try:
                    with os.fdopen(fd, "wb") as handle:
                        handle.write(data)
                    os.chmod(tmp, 0o600)
                    os.replace(tmp, self._dir / f"{name}.artifact")
                except BaseException:
                    Path(tmp).unlink(missing_ok=True)
                    raise
                self._sizes[name] = len(data)
        return ArtifactRef(uri=uri, size_bytes=len(data), media_type=media_type)

    def read(self, uri: str) -> str:
        name = uri.removeprefix(_SCHEME)
        path = self._dir / f"{name}.artifact"
        if not uri.startswith(_SCHEME) or not path.is_file():
            raise ArtifactNotFoundError(uri)
        return path.read_text(encoding="utf-8")
