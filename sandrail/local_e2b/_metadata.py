"""User-defined file metadata, kept as envd keeps it: extended attributes
``user.e2b.<key>`` on the file itself.

So metadata follows the file through a rename, is replaced whole by every
upload (an upload without metadata clears it: ``O_TRUNC`` keeps xattrs), and
a ``setfattr``/``os.setxattr`` made inside the sandbox shows as metadata
too. Uploads carry it as ``X-Metadata-<key>: <value>`` headers; keys are
lowercased, keys and values are printable ASCII, a key is at most 246
bytes and the whole set at most 4096 (envd's limits: one ext4 block).
"""

from __future__ import annotations

import errno
import os
from collections.abc import Iterable, Mapping

__all__ = ["PREFIX", "from_headers", "read_metadata", "validate", "write_metadata"]

PREFIX = "user.e2b."
_HEADER = "x-metadata-"
_MAX_KEY = 255 - len(PREFIX)
_MAX_TOTAL = 4096
_UNSUPPORTED = (errno.ENOTSUP, errno.EOPNOTSUPP)


def from_headers(headers: Iterable[tuple[str, str]]) -> dict[str, str]:
    """The metadata of an upload's ``X-Metadata-*`` headers (names
    lowercase, as h11 gives them): keys lowercased, the first value of a
    repeated header, an empty key ignored."""
    found: dict[str, str] = {}
    for name, value in headers:
        if name.startswith(_HEADER):
            key = name[len(_HEADER) :].lower()
            if key and key not in found:
                found[key] = value
    return found


def _printable(label: str, text: str) -> None:
    for offset, char in enumerate(text):
        if not " " <= char <= "~":
            raise ValueError(
                f"metadata {label} contains non-printable-ASCII byte 0x{ord(char):02x} "
                f"at offset {offset}"
            )


def validate(metadata: Mapping[str, str]) -> None:
    """``ValueError`` naming the first key or value envd would refuse."""
    total = 0
    for key, value in metadata.items():
        if not key:
            raise ValueError("metadata key must not be empty")
        if len(key.encode()) > _MAX_KEY:
            raise ValueError(f"metadata key {key!r} exceeds {_MAX_KEY} bytes")
        _printable("key", key)
        _printable(f"value for key {key!r}", value)
        total += len(PREFIX) + len(key) + len(value)
    if total > _MAX_TOTAL:
        raise ValueError(f"total metadata size {total} exceeds {_MAX_TOTAL} bytes")


def read_metadata(path: str) -> dict[str, str] | None:
    """The metadata of the file at ``path`` (a path this process can reach,
    such as ``/proc/self/fd/N``; links followed), or ``None`` when it has
    none, its filesystem keeps no xattrs or it cannot be read. Entries that
    are not UTF-8 (set from inside the sandbox) are skipped."""
    try:
        names = os.listxattr(path)
    except OSError:
        return None
    found: dict[str, str] = {}
    for name in names:
        if not name.startswith(PREFIX):
            continue
        try:
            found[name[len(PREFIX) :]] = os.getxattr(path, name).decode("utf-8")
        except (OSError, UnicodeDecodeError):
            continue
    return found or None


def write_metadata(fd: int, metadata: Mapping[str, str]) -> None:
    """Replace the metadata of the open file ``fd`` by ``metadata`` (an
    empty one clears it). A filesystem without xattrs keeps none, silently
    (as envd: ``/proc``, ``/sys``); other failures raise ``OSError``."""
    try:
        existing = os.listxattr(fd)
    except OSError as exc:
        if exc.errno in _UNSUPPORTED:
            return
        raise
    for name in existing:
        if name.startswith(PREFIX) and name[len(PREFIX) :] not in metadata:
            try:
                os.removexattr(fd, name)
            except OSError as exc:
                if exc.errno != errno.ENODATA:
                    raise
    for key, value in metadata.items():
        try:
            os.setxattr(fd, PREFIX + key, value.encode())
        except OSError as exc:
            if exc.errno in _UNSUPPORTED:
                return
            raise
