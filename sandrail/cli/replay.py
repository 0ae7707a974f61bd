"""``sandrail replay FILE``: replay a recording and print what ran.

Exit status: 0 when every effect and every result matched the recording and
it was fully consumed; 1 on a divergence (the message names the step, the
effect expected, the one got and the field that differs); 2 when the file
cannot be read as a cassette (truncated, corrupt, a future version, an
outcome no sandbox can give; not a regular file, or bigger than
``--max-bytes``, refused before it is read): one line that names the line,
never a traceback.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import click

from sandrail import replay_file
from sandrail.interpreters.replay import (
    MAX_CASSETTE_BYTES,
    CallEntry,
    CassetteError,
    DivergenceError,
    Entry,
    StepEntry,
    load_cassette,
    render,
)

__all__ = ["replay"]

_DIVERGED = 1
_UNREADABLE = 2


def _header(source: str, header: Mapping[str, Any]) -> Iterable[str]:
    owner = header["owner"]
    who = (
        f"agent owner {owner['agent_id']!r}"
        if owner["type"] == "AgentOwner"
        else f"native owner {json.dumps(owner['scope'], ensure_ascii=False)}"
    )
    settings = header["settings"]
    yield f"cassette {source} (format {header['version']}, sandrail {header['sandrail_version']})"
    yield f"  {header['tools']} tools, {who}, session {header['session_id']!r}"
    yield (
        f"  max_output_bytes={settings['max_output_bytes']}"
        f" foreground_timeout={settings['foreground_timeout_seconds']}s"
        f" background_timeout={settings['background_timeout_seconds']}s"
        f" internet={'yes' if settings['allow_internet_access'] else 'no'}"
        f" artifacts={'yes' if settings['artifacts_enabled'] else 'no'}"
    )


def _transcript(entries: Iterable[Entry]) -> Iterable[str]:
    for entry in entries:
        if isinstance(entry, CallEntry):
            request = entry.request
            call = request["call"]
            arguments = json.dumps(call["arguments"], ensure_ascii=False)
            yield (
                f"call {entry.call}: {call['name']} call_id={call['call_id']!r}"
                f" operation_key={request['operation_key']!r} arguments={_cut(arguments)}"
            )
        elif isinstance(entry, StepEntry):
            if entry.failure is not None:
                failure = entry.failure
                answer = f"failure {failure['delivery']}: {failure['detail']!r}" + (
                    " (aborted)" if failure["aborted"] else ""
                )
            else:
                answer = render(entry.outcome)
            yield f"  step {entry.step:<4} {render(entry.effect)}"
            yield f"            -> {answer}"
        else:
            content = json.dumps(entry.result["content"], ensure_ascii=False)
            yield f"  result    {entry.result['status']} {_cut(content)}"


def _cut(text: str, width: int = 200) -> str:
    return text if len(text) <= width else f"{text[: width - 70]} … {text[-60:]}"


@click.command("replay")
@click.argument("file", type=click.Path(dir_okay=False, path_type=Path))
@click.option("--quiet", "-q", is_flag=True, help="Print only the verdict.")
@click.option(
    "--max-bytes",
    type=click.IntRange(min=1),
    default=MAX_CASSETTE_BYTES,
    show_default=True,
    help="The largest recording read (a replay holds it in memory); bigger is refused.",
)
def replay(file: Path, quiet: bool, max_bytes: int) -> None:
    """Replay the recording FILE through the core and compare every step.

    Exit status: 0 identical, 1 diverged, 2 unreadable file (also one that
    is not a regular file, or is bigger than --max-bytes).
    """
    try:
        cassette = load_cassette(file, max_bytes=max_bytes)
        if not quiet:
            for line in _header(cassette.source, cassette.header):
                click.echo(line)
        report = replay_file(cassette)
    except CassetteError as exc:
        click.echo(f"error: {exc}", err=True)
        sys.exit(_UNREADABLE)
    except DivergenceError as exc:
        if not quiet and exc.report is not None:
            for line in _transcript(exc.report.transcript):
                click.echo(line)
        click.echo(f"DIVERGED: {exc}")
        sys.exit(_DIVERGED)
    except Exception as exc:  # a bug or a file we did not foresee: a message, not a traceback
        click.echo(f"error: {file}: cannot replay: {type(exc).__name__}: {exc}", err=True)
        sys.exit(_UNREADABLE)
    if not quiet:
        for line in _transcript(report.transcript):
            click.echo(line)
    click.echo(
        f"OK: {report.calls} calls and {report.steps} effects replayed; every effect and "
        "every result matched the recording."
    )
    if not report.complete:
        click.echo(
            "warning: the recording has no end line: its recorder was not closed, or the "
            "file was cut short after the last call shown."
        )
