"""``sandrail run``: one ``run_command`` call, its result printed as JSON.

Exit status: 0 ok, 1 error, 2 bad usage, 3 uncertain, 4 approval required,
5 result not written (see :mod:`sandrail.cli._tool_call`).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import click

import sandrail

from ._backends import backend_option
from ._tool_call import (
    budget_option,
    call_tool,
    indent_option,
    key_option,
    record_option,
    session_option,
)

__all__ = ["run"]


@click.command("run")
@click.option("--background", is_flag=True, help="Start it and return its task id at once.")
@click.option("--timeout", type=click.IntRange(1, 86_400), help="Seconds before it is ended.")
@click.option("--cwd", help="Working directory inside the sandbox.")
@click.option("--env", "env_pairs", multiple=True, metavar="NAME=VALUE", help="Repeatable.")
@backend_option
@budget_option
@key_option
@record_option
@session_option
@indent_option
@click.argument("command", nargs=-1, required=True, type=click.UNPROCESSED)
def run(
    background: bool,
    timeout: int | None,
    cwd: str | None,
    env_pairs: tuple[str, ...],
    backend: str,
    max_output_bytes: int,
    operation_key: str | None,
    record_path: Path | None,
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
    call_tool(
        sandrail.command_tools,
        backend,
        session_id,
        max_output_bytes,
        "run_command",
        arguments,
        operation_key,
        indent,
        record_path,
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
