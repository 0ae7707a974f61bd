"""``sandrail run``: one ``run_command`` call, its result printed as JSON.

Exit status: 0 ok, 1 error, 2 bad usage, 3 uncertain, 4 approval required,
5 result not written (see :mod:`sandrail.cli._tool_call`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import click

import sandrail

from ._tool_call import call_tool, tool_call_options

__all__ = ["run"]


@click.command("run")
@click.option("--background", is_flag=True, help="Start it and return its task id at once.")
@click.option("--timeout", type=click.IntRange(1, 86_400), help="Seconds before it is ended.")
@click.option("--cwd", help="Working directory inside the sandbox.")
@click.option("--env", "env_pairs", multiple=True, metavar="NAME=VALUE", help="Repeatable.")
@tool_call_options
@click.argument("command", nargs=-1, required=True, type=click.UNPROCESSED)
def run(
    background: bool,
    timeout: int | None,
    cwd: str | None,
    env_pairs: tuple[str, ...],
    command: tuple[str, ...],
    **options: Any,
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
    call_tool(sandrail.command_tools, "run_command", arguments, **options)


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
