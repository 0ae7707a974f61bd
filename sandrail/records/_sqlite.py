"""``SQLiteRecord``: the embedded ownership record, for the processes of one
machine.

Strategy: one SQLite file in WAL mode (readers never wait for the writer),
a busy timeout (a writer waits for another instead of failing at once),
``synchronous=FULL`` (a change is on disk before ``remember`` returns, so a
start never leaves ahead of its record, power loss included), and one
``BEGIN IMMEDIATE`` transaction per change: the merge of
:func:`~sandrail.records.merge_owned` reads the row and writes it under the
database's write lock, so two processes racing one key are serialized by
SQLite itself. A connection is shared by the threads of a process behind a
lock; each process opens its own.
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Final

from sandrail._ownership import Answer, RecordError, answer_from_row, merge_owned, owned_from_row
from sandrail.core import OwnedCommand, Owner, ToolRequest

from ._tables import (
    OWNED_COLUMNS,
    SCHEMA_VERSION,
    SQLITE,
    TABLES,
    answer_values,
    lost_tables,
    owned_values,
    session_of,
    session_sandbox_of,
    settle_values,
)

__all__ = ["SQLITE_MAGIC", "SQLiteRecord"]

SQLITE_MAGIC: Final = b"SQLite format 3\x00"
"""The first bytes of every SQLite database file."""


class SQLiteRecord:
    """The ownership record in the SQLite file ``path`` (created with its
    tables if missing).

    ``busy_timeout_seconds``: how long a change waits for another process's
    transaction before it fails (then the port's start never leaves).
    Raises :class:`~sandrail.records.RecordError` at once for a path that is
    not a SQLite database of this schema (an old JSON-lines record: see
    :func:`~sandrail.records.migrate_json_lines`), a missing directory or an
    unwritable file; afterwards every failing method raises it too, naming
    the file, never a row's values."""

    def __init__(self, path: str | Path, *, busy_timeout_seconds: float = 10.0) -> None:
        self._path = Path(path)
        self._where = f"the record {self._path}"
        self._lock = threading.Lock()
        self._identity: tuple[int, int] | None = None  # the file's, once open
        self._absolute = self._path.absolute()  # a later chdir must not move it
        if not self._path.parent.is_dir():
            raise RecordError(f"the record's directory {self._path.parent} does not exist")
        if self._path.exists():
            if not self._path.is_file():
                raise RecordError(f"{self._where} is not a regular file")
            _check_magic(self._path)
        try:
            self._db = sqlite3.connect(
                self._path,
                timeout=busy_timeout_seconds,
                isolation_level=None,  # transactions are explicit
                check_same_thread=False,  # shared behind self._lock
            )
            self._db.row_factory = sqlite3.Row
            self._db.execute(f"PRAGMA busy_timeout = {int(busy_timeout_seconds * 1000)}")
            self._db.execute("PRAGMA journal_mode = WAL")
            self._db.execute("PRAGMA synchronous = FULL")
            with self._transaction():
                version = self._schema()
            self._identity = _identity(self._absolute, self._where)
        except sqlite3.Error as exc:
            self._db.close()
            raise RecordError(f"cannot open {self._where}: {exc}") from None
        except RecordError:
            self._db.close()
            raise
        if version != SCHEMA_VERSION:
            self._db.close()
            raise RecordError(
                f"{self._where} has schema {version!r}; this sandrail reads {SCHEMA_VERSION!r}"
            )

    def _schema(self) -> object:
        """Create the tables in a database that never held a schema, else
        check they are all there; the schema version the record says.

        A database that held a schema once and lost a table of it (dropped
        by hand, say) is refused: made again empty, it would forget tasks
        whose start may have left, and a retry would launch them again (C2)."""
        db = self._db
        (ever,) = db.execute("PRAGMA schema_version").fetchone()
        present = {
            row[0]
            for row in db.execute(
                "SELECT name FROM sqlite_master WHERE type = 'table' AND name IN (?, ?, ?)",
                TABLES,
            )
        }
        if not present and ever == 0:
            for statement in SQLITE.schema():
                db.execute(statement)
            db.execute(
                "INSERT INTO sandrail_meta (name, value) VALUES ('schema', ?)", (SCHEMA_VERSION,)
            )
        elif present != set(TABLES):
            raise RecordError(lost_tables(self._where, [t for t in TABLES if t not in present]))
        row = db.execute("SELECT value FROM sandrail_meta WHERE name = 'schema'").fetchone()
        return None if row is None else row[0]

    def _check_identity(self) -> None:
        """Refuse a file deleted or replaced since it was opened: this
        connection would go on writing rows nobody will read again."""
        if self._identity is not None and _identity(self._absolute, self._where) != self._identity:
            raise RecordError(_gone(self._where))

    @property
    def path(self) -> Path:
        """The database file."""
        return self._path

    @contextmanager
    def _transaction(self) -> Iterator[sqlite3.Connection]:
        """One ``BEGIN IMMEDIATE`` transaction: committed whole, or rolled back."""
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                self._check_identity()
                yield self._db
                self._db.execute("COMMIT")
            except BaseException:
                if self._db.in_transaction:
                    self._db.execute("ROLLBACK")
                raise

    def remember(self, request: ToolRequest, owned: OwnedCommand) -> OwnedCommand:
        """See :meth:`~sandrail.records.OwnershipRecord.remember`."""
        session, where = session_of(request), self._where
        try:
            with self._transaction() as db:
                row = db.execute(_SELECT_OWNED, (session, owned.task_id)).fetchone()
                known = None if row is None else owned_from_row(owned.task_id, dict(row), where)
                kept = merge_owned(known, owned)
                db.execute(_REMEMBER, owned_values(session, kept))
        except sqlite3.Error as exc:
            raise RecordError(f"cannot write {self._where}: {exc}") from None
        return kept

    def resolve(self, request: ToolRequest, task_id: str) -> OwnedCommand | None:
        """See :meth:`~sandrail.records.OwnershipRecord.resolve`."""
        session = session_of(request)
        try:
            with self._lock:
                self._check_identity()
                row = self._db.execute(_SELECT_OWNED, (session, task_id)).fetchone()
        except sqlite3.Error as exc:
            raise RecordError(f"cannot read {self._where}: {exc}") from None
        return None if row is None else owned_from_row(task_id, dict(row), self._where)

    def session_sandbox(self, session_id: str, owner: Owner) -> str | None:
        """See :meth:`~sandrail.records.OwnershipRecord.session_sandbox`."""
        try:
            with self._lock:
                self._check_identity()
                rows = self._db.execute(_SESSION_LAUNCHES, (session_id,)).fetchall()
        except sqlite3.Error as exc:
            raise RecordError(f"cannot read {self._where}: {exc}") from None
        return session_sandbox_of(session_id, owner, [tuple(row) for row in rows])

    def note(self, answer: Answer) -> None:
        """See :meth:`~sandrail.records.OwnershipRecord.note`."""
        try:
            if answer.status != "uncertain":
                with self._lock:  # one statement: its own transaction
                    self._check_identity()
                    self._db.execute(_SETTLE, settle_values(answer))
                return
            with self._transaction() as db:
                db.execute(_NOTE, answer_values(answer))
        except sqlite3.Error as exc:
            raise RecordError(f"cannot write {self._where}: {exc}") from None

    def unresolved(self, *, limit: int = 1000) -> list[Answer]:
        """See :meth:`~sandrail.records.OwnershipRecord.unresolved`."""
        try:
            with self._lock:
                self._check_identity()
                rows = self._db.execute(
                    "SELECT * FROM sandrail_answers WHERE status = 'uncertain' "
                    "ORDER BY updated_at, session_id, task_id LIMIT ?",
                    (limit,),
                ).fetchall()
        except sqlite3.Error as exc:
            raise RecordError(f"cannot read {self._where}: {exc}") from None
        return [answer_from_row(dict(row)) for row in rows]

    def close(self) -> None:
        """Close the database connection."""
        with self._lock:
            self._db.close()

    def __enter__(self) -> SQLiteRecord:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"SQLiteRecord({str(self._path)!r})"


_REMEMBER: Final = SQLITE.upsert("sandrail_owned", OWNED_COLUMNS)
"""Writes the row :func:`~sandrail.records.merge_owned` settled on (under the write lock)."""

_SELECT_OWNED: Final = SQLITE.select_owned()
_SESSION_LAUNCHES: Final = SQLITE.select_session_launches()
_NOTE: Final = SQLITE.note_uncertain()
_SETTLE: Final = SQLITE.settle()


def _identity(path: Path, where: str) -> tuple[int, int]:
    """The file's identity (device, inode): another file at the path is another record."""
    try:
        found = path.stat()
    except OSError:
        raise RecordError(_gone(where)) from None
    return (found.st_dev, found.st_ino)


def _gone(where: str) -> str:
    return (
        f"{where} was deleted or replaced while in use; nothing was read or written. "
        "Restore it, or open the record again"
    )


def _check_magic(path: Path) -> None:
    """Refuse a file that is not empty and not SQLite: above all an old
    JSON-lines record, which SQLite would otherwise call "not a database"."""
    try:
        with path.open("rb") as handle:
            head = handle.read(len(SQLITE_MAGIC))
    except OSError as exc:
        raise RecordError(f"cannot read the record {path}: {exc}") from None
    if head and head != SQLITE_MAGIC:
        if head.lstrip()[:1] in (b"{", b""):
            raise RecordError(
                f"{path} is an old JSON-lines ownership record; move it into a SQLite "
                f"record once with `sandrail migrate-record {path} NEW.sqlite` "
                "(or sandrail.records.migrate_json_lines) and use NEW.sqlite"
            )
        raise RecordError(f"the record {path} is not a SQLite database")
