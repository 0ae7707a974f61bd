"""The commands the kit's scenarios and campaign run: real shell text, so
any backend can run them, and the simulator's scripts for the same text.

A backend built on the simulator must be made with ``scripts=SCRIPTS`` so
that it behaves as a shell would for these commands (the simulator's own
:func:`~sandrail.interpreters.simulator.emulate` knows only a few builtins).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

from sandrail.interpreters.simulator import Chunk, Script

__all__ = [
    "BUILD",
    "BUILD_TOKEN",
    "GROUP",
    "LATER",
    "PRINT_ENV",
    "SCRIPTS",
    "SECRET",
    "SERVE",
    "SERVE_TOKEN",
    "SNIPPET",
]

SECRET: Final = "s3cr3t-campaign-env-value"
"""An environment value no result and no recording may ever contain (C17)."""

BUILD: Final = "for i in $(seq 200); do echo 'compiled unit'; done; echo warning >&2"
"""A chatty foreground command: more output than a small budget holds."""
BUILD_TOKEN: Final = (
    "for i in $(seq 200); do echo 'compiled unit'; done; echo \"deploying with $API_TOKEN\""
)
"""Like :data:`BUILD`, then prints the env value ``API_TOKEN`` it was given."""
SERVE: Final = "echo listening; sleep 600 & sleep 600 & wait"
"""A background server with two children; runs until stopped (C18)."""
SERVE_TOKEN: Final = 'echo "listening, token $API_TOKEN"; sleep 600 & sleep 600 & wait'
"""Like :data:`SERVE`, printing the env value ``API_TOKEN`` first."""
PRINT_ENV: Final = 'echo "token=$API_TOKEN"'
"""Prints the env value ``API_TOKEN``."""
GROUP: Final = "sleep 30 & sleep 30 & wait"
"""A command with two children in its process group (C18: a stop ends all three)."""
LATER: Final = "sleep 0.5; echo bg"
"""A background command still running when its launch answers (half a
second, real or virtual), then printing."""
SNIPPET: Final = "echo \"from $(printf 'a file')\"\n"
"""A bash snippet whose output shows it ran from a file, through a shell (C16)."""

SCRIPTS: Mapping[str, Script] = {
    BUILD: Script.prints("compiled unit\n" * 200, stderr="warning\n", exit_code=0, duration=2),
    SERVE: Script.hangs("listening\n", children=2),
    # These print the env value they are launched with (only ever with the
    # kit's SECRET): their results and later reads must show it masked (C17).
    BUILD_TOKEN: Script.prints(
        "compiled unit\n" * 200 + f"deploying with {SECRET}\n", exit_code=0, duration=2
    ),
    SERVE_TOKEN: Script.hangs(f"listening, token {SECRET}\n", children=2),
    PRINT_ENV: Script.prints(f"token={SECRET}\n"),
    GROUP: Script(duration=30, children=2),
    LATER: Script(chunks=(Chunk(offset=0.5, stream="stdout", text="bg\n"),), duration=0.5),
    SNIPPET: Script.prints("from a file\n"),
    "print(1)": Script.prints("1\n"),
    "print(2)": Script.prints("2\n"),
}
"""The simulator's behaviour for every command and snippet the kit runs."""
