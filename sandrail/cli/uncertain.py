"""``sandrail uncertain``: every task whose last answer was uncertain, across
every worker that shares the record, with its locator; ``--reconcile`` reads
their state from the sandbox (never relaunching) and settles them.

Exits 0 when no task is left uncertain, 3 when some are (the number ``run``
uses for uncertain), 1 when a stored answer row is not readable (each is
named by its session and task, after every readable one is listed), 2 for
bad usage (a record that cannot be used included: one line, nothing done).

A call that was ``uncertain`` because the record itself was down could not
be noted then: its worker notes it once the record takes notes again (on its
next call); until then it is in that worker's log only.
"""

from __future__ import annotations

import json
import sys
import unicodedata

import click

from sandrail.records import Reconciliation, RecordError, reconcile, unresolved

from ._backends import close_backend, make_backend
from ._record import open_record_option

__all__ = ["uncertain"]

_UNCERTAIN_LEFT = 3
_UNREADABLE = 1


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
    help="--reconcile: where the sandboxes are (E2B needs E2B_API_KEY; "
    "the simulator's sandboxes live in one process only, so it reconciles nothing real).",
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
            chosen = make_backend(backend)
            try:
                found = reconcile(record, chosen, limit=limit)
            finally:
                close_backend(chosen)
            _print_reconciled(found, as_json)
            left = sum(item.verdict == "still_uncertain" for item in found)
            bad = [item.answer for item in found if item.answer.unreadable is not None]
        else:
            answers = unresolved(record, limit=limit)
            bad = [answer for answer in answers if answer.unreadable is not None]
            if as_json:
                click.echo(json.dumps({"uncertain": [a.to_json() for a in answers]}, indent=2))
            else:
                for answer in answers:
                    if answer.unreadable is None:
                        click.echo(_line(answer.to_json()))
                click.echo(f"{len(answers) - len(bad)} task(s) uncertain", err=True)
            left = len(answers)
    except RecordError as exc:
        raise click.ClickException(str(exc)) from None
    finally:
        record.close()
    for answer in bad:
        click.echo(
            f"unreadable answer row: session_id={_shown(answer.session_id)} "
            f"task_id={_shown(answer.task_id)}: {_shown(answer.unreadable, field=False)}",
            err=True,
        )
    sys.exit(_UNREADABLE if bad else _UNCERTAIN_LEFT if left else 0)


def _line(data: dict[str, object]) -> str:
    locator = data["locator"]
    assert isinstance(locator, dict)
    keys = ("session_id", "operation_key", "sandbox_id", "task_id")
    where = " ".join(f"{key}={_shown(locator.get(key, data.get(key)))}" for key in keys)
    return (
        f"{_shown(data.get('updated_at'))} {_shown(data['tool'])} "
        f"{_shown(data['error_type'])} {where}"
    )


_UNSAFE = frozenset({"Cc", "Cf", "Cs", "Co", "Cn", "Zl", "Zp", "Zs"})
"""Controls (C0, DEL, C1: escape sequences such as OSC 52), format
characters (bidirectional overrides and isolates, zero-width ones),
surrogates, private and unassigned code points, line and paragraph
separators, and spaces other than the plain one: none of them reaches the
terminal as it is."""


def _shown(value: object, *, field: bool = True) -> str:
    """``value`` as the listing prints it: plain text as it is; anything a
    terminal would act on (a newline, a carriage return, an escape sequence
    such as OSC 52, a bidirectional override), or in a ``field`` what could
    forge another field (a space, ``=``, a quote), as a quoted string with
    ``\\xNN`` / ``\\uNNNN`` escapes (in a field a space too, so a field
    never holds one). Stored keys are chosen by clients (an
    MCP client sends any key in ``_meta``) and rows can be edited by hand:
    what a row holds is never trusted to be printable."""
    text = str(value)
    special = '"\\= ' if field else ""
    if (text or not field) and all(
        ch not in special and (ch == " " or unicodedata.category(ch) not in _UNSAFE) for ch in text
    ):
        return text
    escaped = []
    for ch in text:
        if ch in '"\\':
            escaped.append("\\" + ch)
        elif (ch == " " and not field) or unicodedata.category(ch) not in _UNSAFE:
            escaped.append(ch)
        elif ord(ch) <= 0xFF:
            escaped.append(f"\\x{ord(ch):02x}")
        elif ord(ch) <= 0xFFFF:
            escaped.append(f"\\u{ord(ch):04x}")
        else:
            escaped.append(f"\\U{ord(ch):08x}")
    return '"' + "".join(escaped) + '"'


def _print_reconciled(found: list[Reconciliation], as_json: bool) -> None:
    if as_json:
        click.echo(json.dumps({"reconciled": [item.to_json() for item in found]}, indent=2))
        return
    for item in found:
        detail = item.reason or (
            f"{item.status} exit {item.exit_code}" if item.status else item.verdict
        )
        click.echo(
            f"{item.verdict}: {_line(item.answer.to_json())} ({_shown(detail, field=False)})"
        )
    left = sum(item.verdict == "still_uncertain" for item in found)
    click.echo(f"{len(found)} task(s) reconciled, {left} still uncertain", err=True)
