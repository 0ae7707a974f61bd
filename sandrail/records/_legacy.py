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
from sandrail._ownership import _TASK_ID, OwnershipRecord, RecordError, merge_owned
from sandrail.core import OwnedCommand, ToolCall, ToolRequest

from ._sqlite import SQLITE_MAGIC

__all__ = ["CLI_AGENT", "Migration", "migrate_json_lines"]

CLI_AGENT: Final = "cli-agent"
"""The agent id every ``sandrail run`` / ``code`` call is made under."""

MAX_LEGACY_BYTES: Final = 64 * 1024 * 1024
"""The old format's own cap: a bigger file was never a record."""

_CONVERTER = cattrs.Converter(forbid_extra_keys=True)


@attrs.frozen
class Migration:
    """What a move did: rows written, and tasks left out (their task id is
    not the one this session and owner derive from their operation key:
    another session's, or a line edited by hand)."""

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

    Lines of one task merge like writes (:func:`merge_owned`): a line that
    says its start may have left is never taken back by a later one.

    Raises :class:`~sandrail.records.RecordError` before writing anything
    when ``source`` is not a regular file, is over 64 MiB, is already a
    SQLite record, or holds a line that is not an ownership record (exact
    types; sandbox ids, epochs and digests printable and at most
    :data:`MAX_ID_CHARS` characters; the message gives its number and the
    field, never its text); ``ValueError`` for an empty ``session_id``; a
    failing write raises it too, after the rows before it."""
    if not session_id:
        raise ValueError("session_id must not be empty")
    path = Path(source)
    if not path.is_file():
        raise RecordError(f"{path} is not a regular file")
    try:
        with path.open("rb") as handle:
            data = handle.read(MAX_LEGACY_BYTES + 1)
        if len(data) > MAX_LEGACY_BYTES:
            raise RecordError(f"{path} is larger than {MAX_LEGACY_BYTES // 2**20} MiB")
        if data.startswith(SQLITE_MAGIC):
            raise RecordError(f"{path} is already a SQLite record: use it with --record as it is")
        lines = data.decode("utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        raise RecordError(f"cannot read {path}: {exc}") from None
    last: dict[str, OwnedCommand] = {}
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            data = json.loads(line)
            problem = _malformed(data)
            owned = _CONVERTER.structure(data, OwnedCommand) if problem is None else None
        except (ValueError, TypeError, RecursionError, cattrs.BaseValidationError):
            problem = "not an ownership record"
            owned = None
        if owned is None:
            raise RecordError(f"{path}, line {number}: {problem}") from None
        # Lines of one task merge as any write does: once a line says its
        # start may have left, a later line never takes that back (C2).
        last[owned.task_id] = merge_owned(last.get(owned.task_id), owned)
    owner = sandrail.AgentOwner(agent_id=agent_id)
    moved = other = 0
    for owned in last.values():
        if sandrail.task_id(session_id, owner, owned.operation_key) != owned.task_id:
            other += 1
            continue
        record.remember(_request(session_id, agent_id, owned.operation_key), owned)
        moved += 1
    return Migration(moved=moved, other_sessions=other)


MAX_ID_CHARS: Final = 512
"""The longest sandbox id, ledger epoch or digest a line may carry."""

_TEXT_FIELDS: Final = ("sandbox_id", "ledger_epoch", "launch_digest")


def _malformed(data: object) -> str | None:
    """Why a parsed line is not an ownership record (naming the field,
    never its value), or ``None``: the types exactly as the old format wrote
    them, no converting a ``"false"`` into true or a NaN into text."""
    if not isinstance(data, dict):
        return "not an ownership record"
    task, key = data.get("task_id"), data.get("operation_key")
    if not isinstance(task, str) or not _TASK_ID.fullmatch(task):
        return "task_id is not a task id"
    if not isinstance(key, str) or not key:
        return "operation_key is not a non-empty text"
    if not isinstance(data.get("launched"), bool):
        return "launched is not true or false"
    for name in _TEXT_FIELDS:
        value = data.get(name)
        if value is None:
            continue
        if not isinstance(value, str) or not value:
            return f"{name} is not a text"
        if len(value) > MAX_ID_CHARS or not value.isprintable():
            return f"{name} is longer than {MAX_ID_CHARS} characters or not printable"
    return None


def _request(session_id: str, agent_id: str, operation_key: str) -> ToolRequest:
    """The request a record files a row under (only its session is read)."""
    return ToolRequest(
        call=ToolCall(name="run_command", call_id="migrate", arguments={}),
        operation_key=operation_key,
        session_id=session_id,
        definition=None,
        identity=sandrail.AgentIdentity(agent_id=agent_id),
    )
