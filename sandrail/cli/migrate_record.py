"""``sandrail migrate-record OLD NEW``: the old JSON-lines ownership record
(``--record FILE`` before 0.2) moved once into a SQLite or PostgreSQL record.
"""

from __future__ import annotations

from pathlib import Path

import click

from sandrail.records import RecordError, SQLiteRecord, migrate_json_lines

from ._record import open_record_option

__all__ = ["migrate_record"]


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
    if not session_id.strip():
        raise click.BadParameter("must not be empty", param_hint="--session")
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
            f"{moved.other_sessions} task(s) not moved: their task id is not the one "
            f"--session {session_id} derives (another session's: run again with its "
            "--session; or edited by hand)",
            err=True,
        )
