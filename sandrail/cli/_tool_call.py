"""One tool call from the command line, as ``run`` and ``code`` make it.

This process is the harness: it builds a port on a backend, runs one call
through it, prints the tool result as JSON and exits with the result's
status (:data:`EXIT_STATUS`; 5 when the result could not be written). The
options both commands take are defined here once (:func:`tool_call_options`),
and their values reach :func:`call_tool` by name.

SIGINT (Ctrl-C), SIGTERM and SIGHUP while the call runs are its abort
(:mod:`._interrupt`): the result is printed as any other, ``error``
(``canceled``, exit 1) when nothing may have left yet, ``uncertain`` with
the operation key and task id (exit 3) once a start may have.
"""

from __future__ import annotations

import errno
import json
import sys
import uuid
from collections.abc import Callable
from typing import Any, Final, NoReturn, TypeVar

import click

import sandrail
from sandrail.interpreters._cancel import CancelToken
from sandrail.records import OwnershipRecord

from ._backends import backend_option, close_backend, make_backend
from ._interrupt import cancelled_by_signals
from ._record import open_record_option

__all__ = ["EXIT_STATUS", "UNWRITTEN", "call_tool", "tool_call_options"]

F = TypeVar("F", bound=Callable[..., Any])

EXIT_STATUS: Final = {"ok": 0, "error": 1, "uncertain": 3, "approval_required": 4}
"""The exit status of each result status (2 is click's, for bad usage)."""

UNWRITTEN: Final = 5
"""Exit status when the result could not be written to standard output."""

_AGENT = "cli-agent"

_budget_option = click.option(
    "--max-output-bytes",
    type=click.IntRange(min=256),
    default=24_000,
    show_default=True,
    help="Byte budget for the result's canonical JSON.",
)
_key_option = click.option(
    "--operation-key",
    default=None,
    help="Idempotency key: a retry with the same key never launches twice and "
    "returns the first launch's result (across invocations whose sandbox was lost, "
    "only with --record). Default: a new key for each invocation.",
)
_record_option = click.option(
    "--record",
    "record_spec",
    metavar="PATH|postgresql://...",
    default=None,
    help="Keep the ownership record of launched tasks in this SQLite file (made if "
    "missing) or PostgreSQL database (needs the postgres extra). Each invocation is "
    "a harness restart: without a record, a retry in a later invocation finds the "
    "first launch only while the sandbox and its ledger survive; with it, a retry "
    "whose sandbox or ledger was lost is uncertain, never a second launch. "
    "`sandrail uncertain --record ...` lists what stayed uncertain.",
)
_session_option = click.option(
    "--session",
    "session_id",
    default="cli-session",
    show_default=True,
    help="Session id: task ids and the sandbox are scoped to it.",
)
_MAX_INDENT = 16
"""The widest ``--indent``: checked before anything runs (a huge one would
fail, or write for minutes, only after the command ran)."""

_indent_option = click.option(
    "--indent",
    type=click.IntRange(min=0, max=_MAX_INDENT),
    default=2,
    show_default=True,
    help=f"JSON indent, 0 to {_MAX_INDENT}.",
)


def tool_call_options(command: F) -> F:
    """Give ``command`` the options ``run`` and ``code`` share, listed in
    this order: ``--backend``, ``--max-output-bytes``, ``--operation-key``,
    ``--record``, ``--session``, ``--indent``."""
    shared = (
        backend_option,
        _budget_option,
        _key_option,
        _record_option,
        _session_option,
        _indent_option,
    )
    # Applied last to first, as a stack of decorators is.
    for option in reversed(shared):
        command = option(command)
    return command


def call_tool(
    factory: Callable[..., sandrail.ToolPort],
    tool: str,
    arguments: dict[str, Any],
    *,
    backend: str,
    max_output_bytes: int,
    operation_key: str | None,
    record_spec: str | None,
    session_id: str,
    indent: int | None,
) -> None:
    """Run one tool call, print its result and exit with its status. The
    keyword arguments are the values of :func:`tool_call_options`. The
    backend is closed before the process exits, whatever happened: what the
    E2B SDK opened must not outlive the interpreter.
    SIGINT, SIGTERM and SIGHUP abort the call (see the module doc). With
    standard output closed, the exit status is 5 and the result's status
    is on standard error."""
    with cancelled_by_signals() as abort:
        record = open_record_option(record_spec)
        try:
            chosen = make_backend(backend)
            try:
                port = _port(factory, chosen, session_id, max_output_bytes, record)
                result = port.execute_sync(_request(port, tool, arguments, operation_key, abort))
            finally:
                close_backend(chosen)
        finally:
            if record is not None:
                record.close()
        _print_and_exit(result, indent)


def _print_and_exit(result: sandrail.ToolResult, indent: int | None) -> NoReturn:
    try:
        if sys.stdout is None:
            # Closed when the process started: click.echo would print nothing
            # and say nothing.
            raise OSError(errno.EBADF, "standard output is closed")
        click.echo(json.dumps(result.to_dict(), indent=indent, ensure_ascii=False))
        sys.stdout.flush()
    except OSError as exc:
        # The call ran (or not) as its result says, but nobody can read it:
        # never a quiet 0. The status is on standard error, at least.
        click.echo(
            f"Error: could not write the result ({exc.strerror or exc}); its status was "
            f"{result.status}",
            err=True,
        )
        sys.exit(UNWRITTEN)
    sys.exit(EXIT_STATUS[result.status])


def _port(
    factory: Callable[..., sandrail.ToolPort],
    backend: Any,
    session_id: str,
    budget: int,
    record: OwnershipRecord | None = None,
) -> sandrail.ToolPort:
    """A port for one command-line call: this process is the harness, so
    policy allows the call and the caller holds its authority. A value the
    port refuses is a usage error (exit status 2), never a traceback."""
    try:
        return factory(
            backend=backend,
            session_id=session_id,
            owner=sandrail.AgentOwner(agent_id=_AGENT),
            authorize=lambda request: sandrail.ALLOW,
            assert_authority=lambda request: True,
            max_output_bytes=budget,
            record=record,
        )
    except (TypeError, ValueError) as exc:
        raise click.UsageError(str(exc)) from None


def _request(
    port: sandrail.ToolPort,
    name: str,
    arguments: dict[str, Any],
    key: str | None,
    abort: CancelToken,
) -> Any:
    return sandrail.ToolRequest(
        call=sandrail.ToolCall(
            name=name, call_id=f"cli-{uuid.uuid4().hex[:12]}", arguments=arguments
        ),
        operation_key=key if key is not None else f"cli-{uuid.uuid4().hex}",
        session_id=port.settings.session_id,
        definition=port.definition(name),
        identity=sandrail.AgentIdentity(agent_id=_AGENT),
        cancel=abort,
    )
