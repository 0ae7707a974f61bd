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
launch. No record holds a secret: the launch digest it keeps is computed over
the request with its env values redacted (issue 20, item 1).

For an operator: :func:`unresolved` lists every task whose last answer was
``uncertain`` across the fleet, with its locator, and :func:`reconcile` reads
their state from the sandbox without relaunching (``sandrail uncertain``).
"""

from __future__ import annotations

import re
from pathlib import Path

from ._legacy import Migration, migrate_json_lines
from ._postgres import PostgresRecord
from ._protocol import LOCATOR_FIELDS, Answer, OwnershipRecord, RecordError, merge_owned
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

_POSTGRES_SCHEMES = ("postgresql://", "postgres://")
_KEYWORD_CONNINFO = re.compile(r"\s*[A-Za-z_]+\s*=")
"""The start of a ``"host=... dbname=..."`` connection string."""


def open_record(spec: str | Path) -> SQLiteRecord | PostgresRecord:
    """The record ``spec`` names: a ``postgresql://`` (or ``postgres://``, in
    any case) URL or a ``"host=... dbname=..."`` connection string is a
    :class:`PostgresRecord`, checked at once (connected, tables made);
    anything else is the path of a :class:`SQLiteRecord` (a path that
    starts like ``name=`` is read as a connection string: write
    ``./name=...`` for such a file). :class:`RecordError` when it cannot be
    used."""
    text = str(spec)
    if isinstance(spec, str) and (
        text.lower().startswith(_POSTGRES_SCHEMES) or _KEYWORD_CONNINFO.match(text)
    ):
        record = PostgresRecord(text)
        try:
            record.check()
        except BaseException:
            record.close()
            raise
        return record
    return SQLiteRecord(text)
