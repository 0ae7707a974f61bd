"""Durable ownership records: the harness's half of at-most-once.

A port writes each task's :class:`~sandrail.core.OwnedCommand` to its record
before a start may leave and reads it back on every retry, so a retry after
a harness restart, or from another worker of a fleet, expects the claim the
first start may have made and never launches a second time (C2). Give the
record to a port or toolset with ``record=``::

    from sandrail.records import SQLiteRecord, PostgresRecord

    record = SQLiteRecord("owned.sqlite")          # processes of one machine
    record = PostgresRecord("postgresql://...")    # a fleet: sandrail[postgres]
    port = sandrail.command_tools(..., record=record)

A record that cannot be written means the start never leaves (``error``,
``executed: false``); one that cannot be read means ``uncertain``, never a
launch. No record holds a secret, nor anything that is a function of one: the
launch digest it keeps is that of the call as its result shows it, every env
value and every value the session masks replaced by the marker
(:func:`~sandrail.core.recorded_digest`; ``docs/howto/secrets.md``).

For an operator: :func:`unresolved` lists every task whose last answer was
``uncertain`` across the fleet, with its locator, and :func:`reconcile` reads
their state from the sandbox without relaunching (``sandrail uncertain``).
"""

from __future__ import annotations

import re
from pathlib import Path

from sandrail._ownership import LOCATOR_FIELDS, Answer, OwnershipRecord, RecordError, merge_owned

from ._legacy import Migration, migrate_json_lines
from ._postgres import PostgresRecord
from ._reconcile import Reconciliation, reconcile, unresolved
from ._sqlite import SQLiteRecord

__all__ = [
    "LOCATOR_FIELDS",
    "Answer",
    "Migration",
    "OwnershipRecord",
    "PostgresRecord",
    "Reconciliation",
    "RecordError",
    "SQLiteRecord",
    "merge_owned",
    "migrate_json_lines",
    "open_record",
    "reconcile",
    "unresolved",
]

_POSTGRES_SCHEMES = frozenset({"postgresql", "postgres"})
_SCHEME = re.compile(r"([A-Za-z][A-Za-z0-9+.\-]*):")
_KEYWORD_CONNINFO = re.compile(r"[A-Za-z_]+\s*=")
"""The start of a ``"host=... dbname=..."`` connection string."""


def _postgres_url(text: str) -> str | None:
    """``text`` as a PostgreSQL URL with its scheme in lower case, ``None``
    for a path; :class:`RecordError` for a URL of another kind, or one that
    looks like a PostgreSQL URL and is not (``postgresql:host``,
    ``postgresql+psycopg://``, ``pgsql://``): read as a path, it would make
    a local file named after it, password included. The text is never
    shown."""
    scheme = _SCHEME.match(text)
    if scheme is None:
        return None
    name = scheme.group(1).lower()
    rest = text[scheme.end() :]
    if name in _POSTGRES_SCHEMES and rest.startswith("//"):
        return f"{name}:{rest}"
    if rest.startswith("//") or name.startswith(("postgres", "pg")):
        raise RecordError(
            "names neither a SQLite file nor a postgresql:// (or postgres://) URL "
            "(the text is not shown: it may hold a password)"
        )
    return None


def open_record(spec: str | Path) -> SQLiteRecord | PostgresRecord:
    """The record ``spec`` names: a ``postgresql://`` (or ``postgres://``, in
    any case) URL or a ``"host=... dbname=..."`` connection string is a
    :class:`PostgresRecord`, checked at once (connected, tables made);
    anything else is the path of a :class:`SQLiteRecord` (a path that
    starts like ``name=`` is read as a connection string: write
    ``./name=...`` for such a file). Spaces around a name are ignored.
    :class:`RecordError` when it cannot be used, or names another kind of
    URL."""
    text = str(spec)
    if isinstance(spec, str):
        text = text.strip()
        url = _postgres_url(text)
        if url is not None or _KEYWORD_CONNINFO.match(text):
            return _opened(PostgresRecord(url or text))
    return SQLiteRecord(text)


def _opened(record: PostgresRecord) -> PostgresRecord:
    """``record``, checked at once; closed if the check fails."""
    try:
        record.check()
    except BaseException:
        record.close()
        raise
    return record
