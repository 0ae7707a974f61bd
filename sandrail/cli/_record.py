"""Opening the ownership record ``--record`` names, for ``run``, ``code``,
``mcp``, ``uncertain`` and ``migrate-record``: a SQLite file or a
``postgresql://`` URL (:func:`sandrail.records.open_record`). A record that
cannot be used is a usage error (exit status 2, one line, nothing done).
"""

from __future__ import annotations

import click

from sandrail.records import OwnershipRecord, RecordError, open_record

__all__ = ["open_record_option"]


def open_record_option(spec: str | None) -> OwnershipRecord | None:
    """The record ``--record`` names, opened (a PostgreSQL one connected); a
    usage error naming why when it cannot be used."""
    if spec is None:
        return None
    if not spec.strip():
        raise click.BadParameter("must name a file or a postgresql:// URL", param_hint="--record")
    try:
        return open_record(spec)
    except (RecordError, ImportError) as exc:
        raise click.BadParameter(str(exc), param_hint="--record") from None
