"""``sandrail run``: one ``run_command`` call, its result printed as JSON.

Exit status: 0 ok, 1 error, 2 bad usage, 3 uncertain, 4 approval required,
5 result not written (see :mod:`sandrail.cli._tool_call`).

The command is one shell line (``run_command`` runs it with ``bash -c``).
One word is that line as it is; several words are quoted into one line by
:func:`shlex.join`, each staying one argument, as an argument vector does
(joining them with spaces would run ``sh -c 'exit 3'`` as
``sh -c exit 3``). ``--env NAME`` alone takes the value from this process's
environment, as ``docker run -e NAME`` does, so the value never sits in
any process's argument list.
"""

from __future__ import annotations

import os
import shlex
from collections.abc import Mapping, Sequence
from typing import Any

import click

import sandrail

from ._tool_call import call_tool, tool_call_options

__all__ = ["run"]


@click.command("run")
@click.option("--background", is_flag=True, help="Start it and return its task id at once.")
@click.option("--timeout", type=click.IntRange(1, 86_400), help="Seconds before it is ended.")
@click.option("--cwd", help="Working directory inside the sandbox.")
@click.option(
    "--env",
    "env_pairs",
    multiple=True,
    metavar="NAME[=VALUE]",
    help="An env variable for the command; repeatable. NAME alone takes its value from "
    "this environment (as docker run -e NAME), which keeps it out of the process list.",
)
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
    """Run COMMAND with run_command. Put -- before it: sandrail run -- ls -la

    COMMAND is one shell line: a single word runs as it is (sandrail run
    'ls | wc -l'), several words are quoted into one shell line (shlex.join),
    each staying one argument (sandrail run -- sh -c 'exit 3' gives a
    result whose exit_code is 3; sandrail itself exits 0, as its own exit 3
    means uncertain).

    Ctrl-C, SIGTERM or SIGHUP (the terminal closed) aborts the call: error
    (exit 1) while nothing may have left, uncertain (exit 3) with its
    operation key and task id once its start may have; retry with
    --operation-key to learn what happened. One inherited as ignored
    (nohup) stays ignored.
    """
    arguments: dict[str, Any] = {"command": _shell_line(command)}
    if background:
        arguments["background"] = True
        if timeout is not None:
            arguments["background_timeout"] = timeout
    elif timeout is not None:
        arguments["timeout"] = timeout
    if cwd is not None:
        arguments["cwd"] = cwd
    env = _parse_env(env_pairs, os.environ)
    if env is not None:
        arguments["env"] = env
    call_tool(sandrail.command_tools, "run_command", arguments, **options)


def _shell_line(words: Sequence[str]) -> str:
    """The shell line ``words`` stand for: one word as it is, several quoted
    (each one argument of the line)."""
    return words[0] if len(words) == 1 else shlex.join(words)


def _parse_env(pairs: Sequence[str], environment: Mapping[str, str]) -> dict[str, str] | None:
    """The ``--env`` entries as a mapping: ``NAME=VALUE``, or ``NAME`` with
    its value from ``environment``. A malformed entry, or a name that is
    not set there, is a usage error that names its position, never its
    text (it may hold a secret: a value typed without its name)."""
    env: dict[str, str] = {}
    for number, pair in enumerate(pairs, start=1):
        name, sep, value = pair.partition("=")
        if not name:
            raise click.BadParameter(
                f"--env #{number} must be NAME=VALUE or NAME, but the name before '=' is "
                "empty (its text is not shown: it may hold a secret)",
                param_hint="--env",
            )
        if not sep:
            found = environment.get(name)
            if found is None:
                raise click.BadParameter(
                    f"--env #{number} names a variable that is not set in this environment "
                    "(NAME alone takes its value from there; its text is not shown: it may "
                    "be a value typed without its name)",
                    param_hint="--env",
                )
            value = found
        env[name] = value
    return env or None
