"""``sandrail code``: one ``sandbox_run_code`` call on a snippet file (or
standard input), its result printed as JSON.

Exit status as ``sandrail run``; a file that cannot be read, is not UTF-8
or is over 8 MiB is a usage error (2) before anything runs.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any, Final

import click

import sandrail

from ._tool_call import call_tool, tool_call_options

__all__ = ["code"]

_MAX_SNIPPET_BYTES: Final = 8 * 1024 * 1024


@click.command("code")
@click.option(
    "--language",
    "-l",
    default="python",
    show_default=True,
    help="python, javascript or bash (aliases: py, python3, js, node, nodejs, sh, shell).",
)
@click.option("--timeout", type=click.IntRange(1, 86_400), help="Seconds before it is ended.")
@tool_call_options
@click.argument("file", type=click.Path(dir_okay=False, allow_dash=True, path_type=Path))
def code(
    language: str,
    timeout: int | None,
    file: Path,
    **options: Any,
) -> None:
    """Run the snippet in FILE (- for standard input) with sandbox_run_code.

    Ctrl-C, SIGTERM or SIGHUP aborts the call as for sandrail run: error
    (exit 1) while nothing may have left, else uncertain (exit 3) with its
    locator.
    """
    arguments: dict[str, Any] = {"code": _read_snippet(file), "language": language}
    if timeout is not None:
        arguments["timeout"] = timeout
    call_tool(sandrail.code_tools, "sandbox_run_code", arguments, **options)


def _read_snippet(file: Path) -> str:
    """The snippet's text; :class:`click.BadParameter` when it cannot be
    read, is not UTF-8, or is bigger than 8 MiB (read no further)."""
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
        return data.decode("utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise click.BadParameter(f"cannot read {file}: {exc}", param_hint="FILE") from None
