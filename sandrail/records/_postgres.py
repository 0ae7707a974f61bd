"""``PostgresRecord``: the ownership record for a fleet of workers on many
machines (``pip install 'sandrail[postgres]'``: psycopg 3 and its pool).

Strategy: one row per task, ``PRIMARY KEY (session_id, task_id)``, and every
change is one ``INSERT ... ON CONFLICT DO UPDATE ... RETURNING`` statement
(its own transaction, autocommit): PostgreSQL serializes two workers writing
one task, and the ``CASE`` expressions are :func:`~sandrail.records.merge_owned`
in SQL, so the row the statement returns is the settled one. The tables are
created on first use under a transaction-scoped advisory lock (two workers
creating them at once would otherwise collide in the catalog). Connections
come from a pool that checks each one before lending it (a server restarted
since is noticed, not answered with a dead socket); every statement has a
``statement_timeout``, so a slow database fails the change within
``timeout_seconds`` instead of holding the call.

A server that answers nothing at all (frozen, or behind a partition that
drops packets while the kernels still acknowledge them) would never end a
statement_timeout nor a TCP timeout: so every use of a connection, the
pool's check included, also runs under a client-side deadline
(:mod:`._cutoff`) that shuts the connection's socket down when it passes;
the blocked call then fails at once and the pool drops the connection.
TCP keepalives and ``tcp_user_timeout`` catch a peer that vanished.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any, Final

from sandrail._ownership import Answer, RecordError, answer_from_row, owned_from_row
from sandrail.core import OwnedCommand, Owner, ToolRequest

from ._cutoff import bounded
from ._tables import (
    POSTGRES,
    SCHEMA_VERSION,
    TABLES,
    answer_values,
    lost_tables,
    owned_values,
    session_of,
    session_sandbox_of,
    settle_values,
)

if TYPE_CHECKING:
    from psycopg_pool import ConnectionPool

__all__ = ["PostgresRecord"]

_LOCK_KEY: Final = 0x5A4E_4452_4149_4C  # "SANDRAIL", the advisory lock of the schema
_REMEMBER: Final = """
INSERT INTO sandrail_owned AS o
    (session_id, task_id, operation_key, sandbox_id, launched, ledger_epoch, launch_digest)
VALUES (%s, %s, %s, %s, %s, %s, %s)
ON CONFLICT (session_id, task_id) DO UPDATE SET
    sandbox_id = CASE
        WHEN o.launched AND o.sandbox_id IS NOT NULL
        THEN o.sandbox_id ELSE excluded.sandbox_id END,
    ledger_epoch = CASE
        WHEN o.launched AND (o.sandbox_id IS NOT NULL OR excluded.sandbox_id IS NULL)
        THEN o.ledger_epoch ELSE excluded.ledger_epoch END,
    launch_digest = CASE
        WHEN o.launched AND o.launch_digest IS NOT NULL
        THEN o.launch_digest ELSE excluded.launch_digest END,
    launched = o.launched OR excluded.launched,
    operation_key = excluded.operation_key,
    updated_at = now()
RETURNING operation_key, sandbox_id, launched, ledger_epoch, launch_digest
"""

_RESOLVE: Final = POSTGRES.select_owned()
_SESSION_LAUNCHES: Final = POSTGRES.select_session_launches()
_NOTE: Final = POSTGRES.note_uncertain()
_SETTLE: Final = POSTGRES.settle()

_UNRESOLVED: Final = (
    "SELECT session_id, task_id, status, error_type, tool, owner, locator, "
    "to_char(updated_at AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.US\"Z\"') AS updated_at "
    "FROM sandrail_answers WHERE status = 'uncertain' "
    "ORDER BY updated_at, session_id, task_id LIMIT %s"
)


class PostgresRecord:
    """The ownership record in the PostgreSQL database ``conninfo`` names
    (``postgresql://user@host/db`` or ``"host=... dbname=..."``); its tables
    are created on first use.

    ``timeout_seconds`` bounds connecting, waiting for a pooled connection
    and every statement; ``max_connections`` caps the pool. Nothing connects
    until the first use (or :meth:`check`). Every failing method raises
    :class:`~sandrail.records.RecordError` naming the server and database,
    never a password or a row's values; ``ImportError`` with the install
    hint if psycopg is missing."""

    def __init__(
        self,
        conninfo: str,
        *,
        timeout_seconds: float = 10.0,
        max_connections: int = 4,
    ) -> None:
        try:
            import psycopg
            from psycopg.conninfo import conninfo_to_dict
            from psycopg_pool import ConnectionPool
        except ImportError as exc:  # pragma: no cover - the extra is installed in tests
            raise ImportError(
                "PostgresRecord needs psycopg 3 and psycopg-pool: pip install 'sandrail[postgres]'"
            ) from exc
        if not 0 < timeout_seconds <= 3600:
            raise ValueError("timeout_seconds must be above 0 and at most 3600")
        if not isinstance(max_connections, int) or max_connections < 1:
            raise ValueError("max_connections must be a positive integer")
        try:
            parts: dict[str, Any] | None = conninfo_to_dict(conninfo)
        except psycopg.Error:
            parts = None
        if parts is None:
            # Raised outside the handler: psycopg's reason quotes the text,
            # which may hold a password, and would stay as the __context__.
            raise RecordError(
                "not a PostgreSQL connection string: it could not be parsed "
                "(the text is not shown: it may hold a password)"
            )
        self._where = _describe(parts)
        self._errors: tuple[type[BaseException], ...] = (psycopg.Error,)
        milliseconds = int(timeout_seconds * 1000)
        self._timeout = timeout_seconds
        self._local = threading.local()  # the deadline of this thread's operation
        self._conninfo = conninfo
        self._kwargs: dict[str, Any] = {
            "autocommit": True,
            "connect_timeout": max(1, round(timeout_seconds)),
            "options": f"-c statement_timeout={milliseconds} -c lock_timeout={milliseconds}",
            # A peer that vanished (TCP only; a unix socket ignores these).
            "keepalives": 1,
            "keepalives_idle": max(1, round(timeout_seconds)),
            "keepalives_interval": 1,
            "keepalives_count": 3,
            "tcp_user_timeout": milliseconds,
        }
        self._pool: ConnectionPool[Any] = ConnectionPool(
            conninfo,
            min_size=1,
            max_size=max_connections,
            timeout=timeout_seconds,
            kwargs=self._kwargs,
            check=self._check_connection,
            reconnect_timeout=timeout_seconds,
            name="sandrail-record",
            open=False,
        )
        self._opened = False
        self._ready = False
        self._ready_lock = threading.Lock()

    @contextlib.contextmanager
    def _connection(self) -> Iterator[Any]:
        """A pooled connection for one operation, which must end within
        ``timeout_seconds`` from here (:func:`_deadline`) or fail."""
        if not self._ready:
            self.check()
        with (
            self._bounded() as deadline,
            self._pool.connection() as conn,
            _deadline(conn, deadline, self._where),
        ):
            yield conn

    @contextlib.contextmanager
    def _bounded(self) -> Iterator[float]:
        """The deadline of this thread's operation, ``timeout_seconds`` from
        now: the pool's check of the connection it lends runs under it too."""
        deadline = time.monotonic() + self._timeout
        self._local.deadline = deadline
        try:
            yield deadline
        finally:
            self._local.deadline = None

    def _check_connection(self, conn: Any) -> None:
        """The pool's check of a connection before lending it, bounded."""
        from psycopg_pool import ConnectionPool

        deadline = getattr(self._local, "deadline", None)
        if deadline is None:
            deadline = time.monotonic() + self._timeout
        with _deadline(conn, deadline, self._where):
            ConnectionPool.check_connection(conn)

    def check(self) -> None:
        """Connect and create the tables in a database that holds none of
        them (what the first use does); :class:`~sandrail.records.RecordError`
        if the server cannot be reached, holds another schema, or lost some
        of the tables (dropped by hand: made again empty, the record would
        forget tasks that may have launched, C2). A database whose tables
        were all dropped cannot be told from a new one: it starts empty.
        Once the record is in use, it asks the server again (a server gone
        since raises, within ``timeout_seconds``)."""
        with self._ready_lock:
            if self._ready:
                try:
                    with self._connection() as conn:
                        conn.execute("SELECT 1")
                except self._errors as exc:
                    raise RecordError(f"cannot use {self._where}: {_first_line(exc)}") from None
                return
            try:
                if not self._opened:
                    self._probe()
                    self._pool.open(wait=False)
                    self._opened = True
                with (
                    self._bounded() as deadline,
                    self._pool.connection() as conn,
                    _deadline(conn, deadline, self._where),
                    conn.transaction(),
                ):
                    conn.execute("SELECT pg_advisory_xact_lock(%s)", (_LOCK_KEY,))
                    present = {
                        name
                        for (name,) in conn.execute(
                            "SELECT relname FROM pg_class WHERE relname = ANY(%s) "
                            "AND relkind IN ('r', 'p') AND pg_table_is_visible(oid)",
                            (list(TABLES),),
                        )
                    }
                    if not present:
                        for statement in POSTGRES.schema():
                            conn.execute(statement)
                        conn.execute(
                            "INSERT INTO sandrail_meta (name, value) VALUES ('schema', %s)",
                            (SCHEMA_VERSION,),
                        )
                    elif present != set(TABLES):
                        missing = [name for name in TABLES if name not in present]
                        raise RecordError(lost_tables(self._where, missing))
                    row = conn.execute(
                        "SELECT value FROM sandrail_meta WHERE name = 'schema'"
                    ).fetchone()
            except self._errors as exc:
                raise RecordError(f"cannot use {self._where}: {_first_line(exc)}") from None
            version = None if row is None else row[0]
            if version != SCHEMA_VERSION:
                raise RecordError(
                    f"{self._where} has schema {version!r}; this sandrail reads {SCHEMA_VERSION!r}"
                )
            self._ready = True

    def _probe(self) -> None:
        """One direct connection before the pool opens: a server that is not
        there, a database that does not exist or a refused login fails the
        first use at once with the server's own reason, instead of after
        ``timeout_seconds`` of the pool retrying in the background (and
        logging each retry)."""
        import psycopg

        deadline = time.monotonic() + self._timeout
        with (
            psycopg.connect(self._conninfo, **self._kwargs) as conn,
            _deadline(conn, deadline, self._where),
        ):
            conn.execute("SELECT 1")

    def remember(self, request: ToolRequest, owned: OwnedCommand) -> OwnedCommand:
        """See :meth:`~sandrail.records.OwnershipRecord.remember`."""
        values = owned_values(session_of(request), owned)
        row = self._one(_REMEMBER, values, "write")
        if row is None:  # pragma: no cover - RETURNING always gives the row
            raise RecordError(f"{self._where} returned no row for a write")
        return owned_from_row(owned.task_id, row, self._where)

    def resolve(self, request: ToolRequest, task_id: str) -> OwnedCommand | None:
        """See :meth:`~sandrail.records.OwnershipRecord.resolve`."""
        row = self._one(_RESOLVE, (session_of(request), task_id), "read")
        return None if row is None else owned_from_row(task_id, row, self._where)

    def session_sandbox(self, session_id: str, owner: Owner) -> str | None:
        """See :meth:`~sandrail.records.OwnershipRecord.session_sandbox`."""
        try:
            with self._connection() as conn:
                rows = conn.execute(_SESSION_LAUNCHES, (session_id,)).fetchall()
        except self._errors as exc:
            raise RecordError(f"cannot read {self._where}: {_first_line(exc)}") from None
        return session_sandbox_of(session_id, owner, rows)

    def note(self, answer: Answer) -> None:
        """See :meth:`~sandrail.records.OwnershipRecord.note`."""
        try:
            with self._connection() as conn:
                if answer.status == "uncertain":
                    conn.execute(_NOTE, answer_values(answer))
                else:
                    conn.execute(_SETTLE, settle_values(answer))
        except self._errors as exc:
            raise RecordError(f"cannot write {self._where}: {_first_line(exc)}") from None

    def unresolved(self, *, limit: int = 1000) -> list[Answer]:
        """See :meth:`~sandrail.records.OwnershipRecord.unresolved`."""
        try:
            with self._connection() as conn:
                cursor = conn.execute(_UNRESOLVED, (limit,))
                names = [column.name for column in cursor.description or ()]
                rows = [dict(zip(names, row, strict=True)) for row in cursor.fetchall()]
        except self._errors as exc:
            raise RecordError(f"cannot read {self._where}: {_first_line(exc)}") from None
        return [answer_from_row(row) for row in rows]

    def _one(self, statement: str, values: tuple[Any, ...], verb: str) -> dict[str, Any] | None:
        try:
            with self._connection() as conn:
                cursor = conn.execute(statement, values)
                row = cursor.fetchone()
                names = [column.name for column in cursor.description or ()]
        except self._errors as exc:
            raise RecordError(f"cannot {verb} {self._where}: {_first_line(exc)}") from None
        return None if row is None else dict(zip(names, row, strict=True))

    def close(self) -> None:
        """Close the connection pool. Closing twice does nothing."""
        if self._opened:
            self._pool.close()
            self._opened = False

    def __enter__(self) -> PostgresRecord:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"PostgresRecord({self._where})"


@contextlib.contextmanager
def _deadline(conn: Any, deadline: float, where: str) -> Iterator[None]:
    """Run the block on ``conn`` until ``deadline`` (``time.monotonic``);
    past it, the connection's socket is shut down (:mod:`._cutoff`), so
    whatever waits on it fails at once, and :class:`RecordError` says so."""
    try:
        fileno = conn.pgconn.socket
    except Exception:  # a connection already closed: the block fails by itself
        yield
        return
    with bounded(fileno, deadline) as watch:
        try:
            yield
        except BaseException:
            if watch.cut:
                raise RecordError(
                    f"{where} gave no answer in time; its connection was dropped"
                ) from None
            raise


def _describe(parts: Mapping[str, Any]) -> str:
    """The server and database, never the password."""
    host = parts.get("host") or "localhost"
    port = parts.get("port")
    dbname = parts.get("dbname") or parts.get("user") or "(default)"
    return f"PostgreSQL {host}{f':{port}' if port else ''}/{dbname}"


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__
