"""A durable ownership record for the command line (``--record FILE``).

Every ``sandrail run`` is a harness that starts, makes one call and ends: a
restart. What a port knows of the starts it sent dies with it, so a retry in
a later invocation whose sandbox was lost (and a new one made) has nothing
that says a start may have left; it would launch again (C2; outside attack 3,
break 5). With ``--record FILE`` the ports remember each owned task in FILE
before its start is sent and read it back in later invocations, as the
Python API's ``remember_owned_command`` / ``resolve_owned_command`` do.

The file is JSON lines, one :class:`~sandrail.core.OwnedCommand` per line,
appended and flushed to disk before the start leaves; for a task id the last
line wins. A file that cannot be read or holds a line that is not a record is
a usage error before anything runs.
"""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path
from typing import Any

import attrs
import cattrs

from sandrail.core import OwnedCommand

__all__ = ["FileRecord", "RecordError"]

_CONVERTER = cattrs.Converter(forbid_extra_keys=True)
MAX_RECORD_BYTES = 64 * 1024 * 1024
"""A record file larger than this is refused (never read whole into memory)."""


class RecordError(ValueError):
    """The record file cannot be used; the message says why and where."""


class FileRecord:
    """The ownership record kept in ``path`` (see the module doc)."""

    def __init__(self, path: Path) -> None:
        self._path = path
        self._lock = threading.Lock()
        self._known: dict[str, OwnedCommand] = {}
        # A special file (/dev/zero, a FIFO) could be endless; a missing
        # directory would fail every remember (every call uncertain): both
        # are refused before anything runs.
        if path.exists() and not path.is_file():
            raise RecordError(f"the record {path} is not a regular file")
        if not path.parent.is_dir():
            raise RecordError(f"the record's directory {path.parent} does not exist")
        try:
            with path.open("rb") as handle:
                data = handle.read(MAX_RECORD_BYTES + 1)
            if len(data) > MAX_RECORD_BYTES:
                raise RecordError(
                    f"the record {path} is larger than {MAX_RECORD_BYTES // (1024 * 1024)} MiB"
                )
            lines = data.decode("utf-8").splitlines()
        except FileNotFoundError:
            lines = []
        except (OSError, UnicodeDecodeError) as exc:
            raise RecordError(f"cannot read the record {path}: {exc}") from None
        for number, line in enumerate(lines, start=1):
            if not line.strip():
                continue
            try:
                owned = _CONVERTER.structure(json.loads(line), OwnedCommand)
            except (ValueError, TypeError, cattrs.BaseValidationError) as exc:
                reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
                raise RecordError(
                    f"{path}, line {number}: not an ownership record ({reason})"
                ) from None
            self._known[owned.task_id] = owned

    def remember(self, request: Any, owned: OwnedCommand) -> None:
        """Append ``owned`` and flush it to disk (raises ``OSError`` if it
        cannot: the port then reports ``uncertain`` and sends nothing)."""
        line = json.dumps(attrs.asdict(owned), sort_keys=True, ensure_ascii=True) + "\n"
        with self._lock:
            with self._path.open("a", encoding="utf-8") as handle:
                handle.write(line)
                handle.flush()
                os.fsync(handle.fileno())
            self._known[owned.task_id] = owned

    def resolve(self, request: Any, task_id: str) -> OwnedCommand | None:
        with self._lock:
            return self._known.get(task_id)
