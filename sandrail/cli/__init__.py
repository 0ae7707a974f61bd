"""The ``sandrail`` command line: one package, one module per command.

``run`` and ``code`` (:mod:`.run`, :mod:`.code`) build a port on a backend
(the embedded simulator unless told otherwise), run one tool call through
it, and print the tool result as JSON. Exit status: 0 for ``ok``, 1 for
``error``, 2 for bad usage, 3 for ``uncertain``, 4 for
``approval_required``, 5 when the result could not be written to standard
output. ``simulate``, ``replay``, ``mcp`` and ``local-e2b`` live in modules
of the same names and document their own exit status.

Imports run one way (import-linter holds them to it): this module imports
the commands, the commands import the private helpers beside them
(``_tool_call``, ``_backends``, ``_record``, ``_simulate_report``) and the
library, and nothing of the library imports the command line.
"""

from __future__ import annotations

import sys

import click

import sandrail

from .code import code
from .local_e2b import local_e2b
from .mcp import mcp
from .migrate_record import migrate_record
from .replay import replay
from .run import run
from .simulate import simulate
from .uncertain import uncertain

__all__ = ["main"]


class _Commands(click.Group):
    """A group whose help lists each command's summary whole (the first
    sentence of its help, wrapped, never cut with "...")."""

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        rows = []
        for name in self.list_commands(ctx):
            command = self.get_command(ctx, name)
            if command is not None and not command.hidden:
                rows.append((name, command.get_short_help_str(limit=sys.maxsize)))
        if rows:
            with formatter.section("Commands"):
                formatter.write_dl(rows)


@click.group(cls=_Commands, context_settings={"help_option_names": ["-h", "--help"]})
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


main.add_command(run)
main.add_command(code)
main.add_command(local_e2b)
main.add_command(replay)
main.add_command(simulate)
main.add_command(mcp)
main.add_command(uncertain)
main.add_command(migrate_record)
