"""Moving an old JSON-lines ownership record (``sandrail run --record FILE``
before the records package) into a record of this package, once.

The old file held one :class:`~sandrail.core.OwnedCommand` a line, for a task
id the last line winning, and no session id: the session was the
command line's ``--session``. So a move names the session; a line whose task
id that session (with the command line's owner) does not derive is left
out and counted, to be moved by another run with its own session.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Final

import attrs
import cattrs

import sandrail
from sandrail.core import OwnedCommand, ToolCall, ToolRequest

from ._protocol import OwnershipRecord, RecordError

__all__ = ["CLI_AGENT", "Migration", "migrate_json_lines"]

CLI_AGENT: Final = "cli-agent"
"""The agent id every ``sandrail run`` / ``code`` call is made under."""

MAX_LEGACY_BYTES: Final = 64 * 1024 * 1024
"""The old format's own cap: a bigger file was never a record."""

_CONVERTER = cattrs.Converter(forbid_extra_keys=True)


@attrs.frozen
class Migration:
    """What a move did: rows written, and lines left out (another session's)."""

    moved: int
    other_sessions: int


def migrate_json_lines(
    source: str | Path,
    record: OwnershipRecord,
    *,
    session_id: str = "cli-session",
    agent_id: str = CLI_AGENT,
) -> Migration:
    """Read the old JSON-lines record ``source`` once and write each task's
    last line into ``record`` under ``session_id`` (merged like any write:
    a row already there that says its start may have left keeps its proof).

    Raises :class:`~sandrail.records.RecordError` before writing anything
    when ``source`` is not a regular file, is over 64 MiB, or holds a line
    that is not an ownership record (the message gives its number, never its
    text); a failing write raises it too, after the rows before it."""
    path = Path(source)
    if not path.is_file():
        raise RecordError(f"{path} is not a regular file")
    try:
        with path.open("rb") as handle:
            data = handle.read(MAX_LEGACY_BYTES + 1)
        if len(data) > MAX_LEGACY_BYTES:
            raise RecordError(f"{path} is larger than {MAX_LEGACY_BYTES // 2**20} MiB")
        lines = data.decode("utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        raise RecordError(f"cannot read {path}: {exc}") from None
    last: dict[str, OwnedCommand] = {}
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            owned = _CONVERTER.structure(json.loads(line), OwnedCommand)
        except (ValueError, TypeError, cattrs.BaseValidationError):
            raise RecordError(f"{path}, line {number}: not an ownership record") from None
        last[owned.task_id] = owned
    owner = sandrail.AgentOwner(agent_id=agent_id)
    moved = other = 0
    for owned in last.values():
        if sandrail.task_id(session_id, owner, owned.operation_key) != owned.task_id:
            other += 1
            continue
        record.remember(_request(session_id, agent_id, owned.operation_key), owned)
        moved += 1
    return Migration(moved=moved, other_sessions=other)


def _request(session_id: str, agent_id: str, operation_key: str) -> ToolRequest:
    """The request a record files a row under (only its session is read)."""
    return ToolRequest(
        call=ToolCall(name="run_command", call_id="migrate", arguments={}),
        operation_key=operation_key,
        session_id=session_id,
        definition=None,
        identity=sandrail.AgentIdentity(agent_id=agent_id),
    )
