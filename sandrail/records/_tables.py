"""The SQL records' tables and rows, written once for SQLite and PostgreSQL.

Strategy: both records keep the same two tables, so a column added to one
must be added to the other. The statements they share are written here
once, over a :class:`Dialect` that names what the two databases spell
differently (the parameter mark, the flag type, the clock); each record keeps
only the statements that really differ (SQLite merges in Python under its
write lock, PostgreSQL in one ``ON CONFLICT`` statement).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any, Final

import attrs

from sandrail._ownership import Answer, RecordError, dumps
from sandrail.core import OwnedCommand, Owner, ToolRequest, task_id

__all__ = [
    "ANSWER_COLUMNS",
    "OWNED_COLUMNS",
    "POSTGRES",
    "SCHEMA_VERSION",
    "SQLITE",
    "TABLES",
    "Dialect",
    "answer_values",
    "lost_tables",
    "owned_values",
    "session_of",
    "session_sandbox_of",
    "settle_values",
]

SCHEMA_VERSION: Final = "1"

TABLES: Final = ("sandrail_meta", "sandrail_owned", "sandrail_answers")
"""The tables of a record, both stores alike."""

OWNED_COLUMNS: Final = (
    "session_id",
    "task_id",
    "operation_key",
    "sandbox_id",
    "launched",
    "ledger_epoch",
    "launch_digest",
)
"""The columns of ``sandrail_owned`` a record writes, in the order of :func:`owned_values`."""
ANSWER_COLUMNS: Final = (
    "session_id",
    "task_id",
    "status",
    "error_type",
    "tool",
    "owner",
    "locator",
)
"""The columns of ``sandrail_answers`` a record writes, in the order of :func:`answer_values`."""
"""The version both records write in ``sandrail_meta`` and refuse to read another of."""


@attrs.frozen
class Dialect:
    """What one database spells its own way, and the statements spelled in it."""

    param: str
    """The parameter mark: ``?`` or ``%s``."""
    flag: str
    """The column type of a true/false value."""
    clock: str
    """The column type and default of a time the row was last changed."""
    now: str
    """The expression for the present time, in the clock's column."""

    def schema(self) -> tuple[str, ...]:
        """The statements that create the tables if they are missing."""
        return (
            """CREATE TABLE IF NOT EXISTS sandrail_meta (
                name TEXT PRIMARY KEY,
                value TEXT NOT NULL
            )""",
            f"""CREATE TABLE IF NOT EXISTS sandrail_owned (
                session_id TEXT NOT NULL,
                task_id TEXT NOT NULL,
                operation_key TEXT NOT NULL,
                sandbox_id TEXT,
                launched {self.flag} NOT NULL,
                ledger_epoch TEXT,
                launch_digest TEXT,
                updated_at {self.clock},
                PRIMARY KEY (session_id, task_id)
            )""",
            f"""CREATE TABLE IF NOT EXISTS sandrail_answers (
                session_id TEXT NOT NULL,
                task_id TEXT NOT NULL,
                status TEXT NOT NULL,
                error_type TEXT,
                tool TEXT NOT NULL,
                owner TEXT NOT NULL,
                locator TEXT NOT NULL,
                updated_at {self.clock},
                PRIMARY KEY (session_id, task_id)
            )""",
            "CREATE INDEX IF NOT EXISTS sandrail_answers_status "
            "ON sandrail_answers (status, updated_at)",
        )

    def select_owned(self) -> str:
        """One task's owned row, by session and task id."""
        return (
            "SELECT operation_key, sandbox_id, launched, ledger_epoch, launch_digest "
            f"FROM sandrail_owned WHERE session_id = {self.param} AND task_id = {self.param}"
        )

    def select_session_launches(self) -> str:
        """A session's rows that launched in a known sandbox, latest first
        (:func:`session_sandbox_of` picks the owner's)."""
        return (
            "SELECT task_id, operation_key, sandbox_id FROM sandrail_owned "
            f"WHERE session_id = {self.param} AND launched AND sandbox_id IS NOT NULL "
            "ORDER BY updated_at DESC LIMIT 1000"
        )

    def upsert(self, table: str, columns: Sequence[str]) -> str:
        """Writes one task's row of ``table`` whole, over what it held:
        ``columns`` in order, the two keys (session, task) first."""
        marks = ", ".join([self.param] * len(columns))
        changes = "".join(f"{name} = excluded.{name}, " for name in columns[2:])
        return (
            f"INSERT INTO {table} ({', '.join(columns)}) VALUES ({marks}) "
            f"ON CONFLICT (session_id, task_id) DO UPDATE SET {changes}updated_at = {self.now}"
        )

    def note_uncertain(self) -> str:
        """Writes an uncertain answer over the task's last (:func:`answer_values`)."""
        return self.upsert("sandrail_answers", ANSWER_COLUMNS)

    def settle(self) -> str:
        """Settles an uncertain answer, and only an uncertain one (:func:`settle_values`)."""
        p = self.param
        return (
            f"UPDATE sandrail_answers SET status = {p}, error_type = {p}, "
            f"updated_at = {self.now} "
            f"WHERE session_id = {p} AND task_id = {p} AND status = 'uncertain'"
        )


SQLITE: Final = Dialect(
    param="?",
    flag="INTEGER",
    clock="TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now'))",
    now="strftime('%Y-%m-%dT%H:%M:%fZ', 'now')",
)
POSTGRES: Final = Dialect(
    param="%s", flag="BOOLEAN", clock="TIMESTAMPTZ NOT NULL DEFAULT now()", now="now()"
)


def session_of(request: ToolRequest) -> str:
    """The session the request's rows are filed under; :class:`RecordError` without one."""
    session = request.session_id
    if not isinstance(session, str):
        raise RecordError("the request has no session id to file the record under")
    return session


def owned_values(session: str, owned: OwnedCommand) -> tuple[Any, ...]:
    """The ``sandrail_owned`` columns in table order, ``updated_at`` left out."""
    return (
        session,
        owned.task_id,
        owned.operation_key,
        owned.sandbox_id,
        owned.launched,
        owned.ledger_epoch,
        owned.launch_digest,
    )


def answer_values(answer: Answer) -> tuple[Any, ...]:
    """The ``sandrail_answers`` columns in table order, ``updated_at`` left out."""
    return (
        answer.session_id,
        answer.task_id,
        answer.status,
        answer.error_type,
        answer.tool,
        dumps(answer.owner),
        dumps(answer.locator),
    )


def settle_values(answer: Answer) -> tuple[Any, ...]:
    """The values of :meth:`Dialect.settle`."""
    return (answer.status, answer.error_type, answer.session_id, answer.task_id)


def lost_tables(where: str, missing: list[str]) -> str:
    """Why a record that lost tables is refused, and what to do."""
    return (
        f"{where} held a sandrail schema but its tables {', '.join(missing)} are missing "
        "(dropped by hand?); it is not read as empty, since a task it recorded could then "
        "launch again. Restore it from a backup, or use a new record"
    )


def session_sandbox_of(session: str, owner: Owner, rows: Iterable[Sequence[Any]]) -> str | None:
    """The sandbox ``owner``'s launches of ``session`` went to, from the
    rows of :meth:`Dialect.select_session_launches` (task id, operation key,
    sandbox id; latest first): a row is ``owner``'s when its task id is the
    one its key derives for ``owner`` (C1), since the table files rows by
    session only."""
    for task, key, sandbox_id in rows:
        if (
            isinstance(key, str)
            and isinstance(sandbox_id, str)
            and task_id(session, owner, key) == task
        ):
            return sandbox_id
    return None
