"""The ``sandrail`` command line.

``run`` and ``code`` build a port on a backend (the embedded simulator unless
told otherwise), run one tool call through it, and print the tool result as
JSON. Exit status: 0 for ``ok``, 1 for ``error``, 2 for bad usage, 3 for
``uncertain``, 4 for ``approval_required``, 5 when the result could not be
written to standard output. ``simulate`` and ``replay`` live
in their own modules and document their own exit status.
"""

from __future__ import annotations

import importlib.util
import json
import os
import sys
import uuid
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Final

import click

import sandrail
from sandrail._local_e2b_cli import local_e2b
from sandrail._mcp_cli import mcp
from sandrail._records_cli import migrate_record, open_record_option, uncertain
from sandrail._replay_cli import replay
from sandrail._simulate_cli import simulate
from sandrail.records import OwnershipRecord

__all__ = ["main"]

_EXIT = {"ok": 0, "error": 1, "uncertain": 3, "approval_required": 4}
_AGENT = "cli-agent"


def _backend(name: str) -> Any:
    if name == "simulator":
        from sandrail.interpreters.simulator import Simulator

        return Simulator()
    api_key = os.environ.get("E2B_API_KEY", "").strip()
    if not api_key:
        raise click.UsageError(
            "--backend e2b needs an E2B API key: set E2B_API_KEY "
            "(or use --backend simulator, which needs no account)."
        )
    if importlib.util.find_spec("e2b") is None:
        raise click.UsageError("--backend e2b needs the e2b SDK: pip install 'sandrail[e2b]'.")
    from sandrail.interpreters.e2b import E2BBackend

    # A local server (`sandrail local-e2b`) is named by E2B_API_URL and
    # E2B_SANDBOX_URL, as the SDK reads them; passed on explicitly.
    api_url = os.environ.get("E2B_API_URL", "").strip() or None
    sandbox_url = os.environ.get("E2B_SANDBOX_URL", "").strip() or None
    try:
        return E2BBackend(api_key=api_key, api_url=api_url, sandbox_url=sandbox_url)
    except (TypeError, ValueError) as exc:
        raise click.UsageError(str(exc)) from None


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


_UNWRITTEN: Final = 5
"""Exit status when the result could not be written to standard output."""

_MAX_SNIPPET_BYTES: Final = 8 * 1024 * 1024


def _call(
    factory: Callable[..., sandrail.ToolPort],
    backend_name: str,
    session_id: str,
    budget: int,
    tool: str,
    arguments: dict[str, Any],
    key: str | None,
    indent: int | None,
    record_spec: str | None = None,
) -> None:
    """Run one tool call, print its result and exit with its status. The
    backend is closed before the process exits, whatever happened: what the
    E2B SDK opened must not outlive the interpreter (issue 9, item 13)."""
    record = open_record_option(record_spec)
    try:
        backend = _backend(backend_name)
        try:
            port = _port(factory, backend, session_id, budget, record)
            result = port.execute_sync(_request(port, tool, arguments, key))
        finally:
            close = getattr(backend, "close", None)
            if callable(close):
                close()
    finally:
        if record is not None:
            record.close()
    try:
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
        sys.exit(_UNWRITTEN)
    sys.exit(_EXIT[result.status])


def _request(port: sandrail.ToolPort, name: str, arguments: dict[str, Any], key: str | None) -> Any:
    return sandrail.ToolRequest(
        call=sandrail.ToolCall(
            name=name, call_id=f"cli-{uuid.uuid4().hex[:12]}", arguments=arguments
        ),
        operation_key=key if key is not None else f"cli-{uuid.uuid4().hex}",
        session_id=port.settings.session_id,
        definition=port.definition(name),
        identity=sandrail.AgentIdentity(agent_id=_AGENT),
    )


def _parse_env(pairs: Sequence[str]) -> dict[str, str] | None:
    """The ``--env`` pairs as a mapping; a malformed one is a usage error
    that names its position, never its text (it may hold a secret)."""
    env: dict[str, str] = {}
    for number, pair in enumerate(pairs, start=1):
        name, sep, value = pair.partition("=")
        if not sep or not name:
            why = "it has no '='" if not sep else "the name before '=' is empty"
            raise click.BadParameter(
                f"--env #{number} must be NAME=VALUE, but {why} (its text is not shown: "
                "it may hold a secret)",
                param_hint="--env",
            )
        env[name] = value
    return env or None


_backend_option = click.option(
    "--backend",
    type=click.Choice(["simulator", "e2b"]),
    default="simulator",
    show_default=True,
    help="Where commands run: the in-memory simulator (no account needed) or E2B "
    "(needs E2B_API_KEY and the e2b extra).",
)
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


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(sandrail.__version__, prog_name="sandrail")
def main() -> None:
    """Run shell commands and code snippets in sandboxes, safely.

    `run` and `code` print the tool result as JSON (exit status 0 ok, 1 error,
    2 bad usage, 3 uncertain, 4 approval required, 5 result not written). `simulate` runs the fault
    campaign on the embedded simulator; `replay` re-runs a recording through
    the core.
    """
    # Text that cannot be encoded (a lone surrogate in a tampered recording,
    # say) is printed escaped, never as an encoding traceback.
    for stream in (sys.stdout, sys.stderr):
        reconfigure = getattr(stream, "reconfigure", None)
        if callable(reconfigure):
            reconfigure(errors="backslashreplace")


@main.command()
@click.option("--background", is_flag=True, help="Start it and return its task id at once.")
@click.option("--timeout", type=click.IntRange(1, 86_400), help="Seconds before it is ended.")
@click.option("--cwd", help="Working directory inside the sandbox.")
@click.option("--env", "env_pairs", multiple=True, metavar="NAME=VALUE", help="Repeatable.")
@_backend_option
@_budget_option
@_key_option
@_record_option
@_session_option
@_indent_option
@click.argument("command", nargs=-1, required=True, type=click.UNPROCESSED)
def run(
    background: bool,
    timeout: int | None,
    cwd: str | None,
    env_pairs: tuple[str, ...],
    backend: str,
    max_output_bytes: int,
    operation_key: str | None,
    record_spec: str | None,
    session_id: str,
    indent: int,
    command: tuple[str, ...],
) -> None:
    """Run COMMAND with run_command. Put -- before it: sandrail run -- ls -la"""
    arguments: dict[str, Any] = {"command": " ".join(command)}
    if background:
        arguments["background"] = True
        if timeout is not None:
            arguments["background_timeout"] = timeout
    elif timeout is not None:
        arguments["timeout"] = timeout
    if cwd is not None:
        arguments["cwd"] = cwd
    env = _parse_env(env_pairs)
    if env is not None:
        arguments["env"] = env
    _call(
        sandrail.command_tools,
        backend,
        session_id,
        max_output_bytes,
        "run_command",
        arguments,
        operation_key,
        indent,
        record_spec,
    )


@main.command()
@click.option(
    "--language",
    "-l",
    default="python",
    show_default=True,
    help="python, javascript or bash (aliases: py, python3, js, node, nodejs, sh, shell).",
)
@click.option("--timeout", type=click.IntRange(1, 86_400), help="Seconds before it is ended.")
@_backend_option
@_budget_option
@_key_option
@_record_option
@_session_option
@_indent_option
@click.argument("file", type=click.Path(dir_okay=False, allow_dash=True, path_type=Path))
def code(
    language: str,
    timeout: int | None,
    backend: str,
    max_output_bytes: int,
    operation_key: str | None,
    record_spec: str | None,
    session_id: str,
    indent: int,
    file: Path,
) -> None:
    """Run the snippet in FILE (- for standard input) with sandbox_run_code."""
    try:
        if str(file) == "-":
            data = sys.stdin.buffer.read(_MAX_SNIPPET_BYTES + 1)
        else:
            with file.open("rb") as handle:
                data = handle.read(_MAX_SNIPPET_BYTES + 1)
        if len(data) > _MAX_SNIPPET_BYTES:
            raise click.BadParameter(
                f"{file} is larger than {_MAX_SNIPPET_BYTES // (1024 * 1024)} MiB",
                param_hint="FILE",
            )
        source = data.decode("utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise click.BadParameter(f"cannot read {file}: {exc}", param_hint="FILE") from None
    arguments: dict[str, Any] = {"code": source, "language": language}
    if timeout is not None:
        arguments["timeout"] = timeout
    _call(
        sandrail.code_tools,
        backend,
        session_id,
        max_output_bytes,
        "sandbox_run_code",
        arguments,
        operation_key,
        indent,
        record_spec,
    )


main.add_command(local_e2b)
main.add_command(replay)
main.add_command(simulate)
main.add_command(mcp)
main.add_command(uncertain)
main.add_command(migrate_record)
