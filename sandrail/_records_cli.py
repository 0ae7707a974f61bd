"""The command line of ownership records: ``--record`` for ``run``, ``code``
and ``mcp``; ``sandrail uncertain`` (what stayed uncertain, and reconciling
it); ``sandrail migrate-record`` (an old JSON-lines record, moved once).

``uncertain`` exits 0 when no task is left uncertain, 3 when some are (the
same number ``run`` uses for uncertain), 2 for bad usage (a record that
cannot be used included: one line, nothing done).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import click

from sandrail.records import (
    OwnershipRecord,
    Reconciliation,
    RecordError,
    SQLiteRecord,
    migrate_json_lines,
    open_record,
    reconcile,
    unresolved,
)

__all__ = ["migrate_record", "open_record_option", "uncertain"]

_UNCERTAIN_LEFT = 3


def open_record_option(spec: str | None) -> OwnershipRecord | None:
    """The record ``--record`` names, opened (a PostgreSQL one connected); a
    usage error naming why when it cannot be used."""
    if spec is None:
        return None
    if not spec.strip():
        raise click.BadParameter("must name a file or a postgresql:// URL", param_hint="--record")
    try:
        return open_record(spec)
    except RecordError as exc:
        raise click.BadParameter(str(exc), param_hint="--record") from None
    except ImportError as exc:
        raise click.BadParameter(str(exc), param_hint="--record") from None


@click.command()
@click.option(
    "--record",
    "record_spec",
    metavar="PATH|postgresql://...",
    required=True,
    help="The ownership record the workers share (a SQLite file or a PostgreSQL URL).",
)
@click.option(
    "--reconcile",
    "reconcile_",
    is_flag=True,
    help="Read each task's state from its sandbox (never relaunching it) and keep what was found.",
)
@click.option(
    "--backend",
    type=click.Choice(["e2b", "simulator"]),
    default="e2b",
    show_default=True,
    help="--reconcile: where the sandboxes are (E2B needs E2B_API_KEY).",
)
@click.option("--limit", type=click.IntRange(1, 100_000), default=1000, show_default=True)
@click.option("--json", "as_json", is_flag=True, help="One JSON object instead of lines.")
def uncertain(record_spec: str, reconcile_: bool, backend: str, limit: int, as_json: bool) -> None:
    """List every task whose last answer was uncertain, across every worker
    that shares the record, with the locator that finds it; with
    --reconcile, read their state from the sandbox and settle them."""
    record = open_record_option(record_spec)
    assert record is not None
    try:
        if reconcile_:
            from sandrail.cli import _backend

            chosen = _backend(backend)
            try:
                found = reconcile(record, chosen, limit=limit)
            finally:
                close = getattr(chosen, "close", None)
                if callable(close):
                    close()
            _print_reconciled(found, as_json)
            left = sum(item.verdict == "still_uncertain" for item in found)
        else:
            answers = unresolved(record, limit=limit)
            if as_json:
                click.echo(json.dumps({"uncertain": [a.to_json() for a in answers]}, indent=2))
            else:
                for answer in answers:
                    click.echo(_line(answer.to_json()))
                click.echo(f"{len(answers)} task(s) uncertain", err=True)
            left = len(answers)
    except RecordError as exc:
        raise click.ClickException(str(exc)) from None
    finally:
        record.close()
    sys.exit(_UNCERTAIN_LEFT if left else 0)


def _line(data: dict[str, object]) -> str:
    locator = data["locator"]
    assert isinstance(locator, dict)
    keys = ("session_id", "operation_key", "sandbox_id", "task_id")
    where = " ".join(f"{key}={locator.get(key, data.get(key))}" for key in keys)
    return f"{data.get('updated_at')} {data['tool']} {data['error_type']} {where}"


def _print_reconciled(found: list[Reconciliation], as_json: bool) -> None:
    if as_json:
        click.echo(json.dumps({"reconciled": [item.to_json() for item in found]}, indent=2))
        return
    for item in found:
        detail = item.reason or (
            f"{item.status} exit {item.exit_code}" if item.status else item.verdict
        )
        click.echo(f"{item.verdict}: {_line(item.answer.to_json())} ({detail})")
    left = sum(item.verdict == "still_uncertain" for item in found)
    click.echo(f"{len(found)} task(s) reconciled, {left} still uncertain", err=True)


@click.command("migrate-record")
@click.argument("old", type=click.Path(dir_okay=False, path_type=Path))
@click.argument("new", metavar="NEW|postgresql://...")
@click.option(
    "--session",
    "session_id",
    default="cli-session",
    show_default=True,
    help="The --session the old record was written under.",
)
def migrate_record(old: Path, new: str, session_id: str) -> None:
    """Move the old JSON-lines ownership record OLD (sandrail run --record
    before 0.2) into the SQLite or PostgreSQL record NEW, once; then use
    --record NEW. Lines of another session are counted, not moved."""
    if Path(new).resolve() == old.resolve():
        raise click.BadParameter("NEW must be another file than OLD", param_hint="NEW")
    record = open_record_option(new)
    assert record is not None
    try:
        moved = migrate_json_lines(old, record, session_id=session_id)
    except RecordError as exc:
        raise click.ClickException(str(exc)) from None
    finally:
        record.close()
    kind = "SQLite" if isinstance(record, SQLiteRecord) else "PostgreSQL"
    click.echo(f"moved {moved.moved} task(s) into the {kind} record {new}")
    if moved.other_sessions:
        click.echo(
            f"{moved.other_sessions} line(s) belong to another --session: run again with it",
            err=True,
        )
