"""What an ownership record is: the protocol, the merge rule, the rows.

The ownership record is the harness's half of at-most-once (the sandbox's
ledger is the other half, ``docs/explanation/ledger.md``). The port writes an
:class:`~sandrail.core.OwnedCommand` before a start of its task may leave
(``remember``) and reads it on every launch and every read or stop of the
task (``resolve``). Besides, it notes the last answer each task got
(``note``), so an operator can list the tasks whose last answer was
``uncertain`` across a fleet and reconcile them.

Strategy: the record settles races itself. Two workers that run one operation
key at once both write; the first that recorded a start that may have left
wins (its sandbox's ledger epoch and its launch digest stay), and ``remember``
answers every writer with the row as it now stands, so the loser sends its
start expecting the winner's claim: the sandbox answers ``deduplicated``, or
``uncertain`` when it cannot show the claim, never a second launch.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any, Final, Protocol, runtime_checkable

import attrs

from sandrail.core import (
    AgentIdentity,
    AgentOwner,
    NativeIdentity,
    NativeOwner,
    OwnedCommand,
    Owner,
    ToolRequest,
    ToolResult,
    canonical_json,
    merged,
)

__all__ = [
    "LOCATOR_FIELDS",
    "Answer",
    "OwnershipRecord",
    "RecordError",
    "merge_owned",
    "owned_from_row",
]

_TASK_ID: Final = re.compile(r"[0-9a-f]{64}")

LOCATOR_FIELDS: Final = (
    "agent_id",
    "scope",
    "run_id",
    "turn_id",
    "build_id",
    "task_chain_id",
    "parent_run_id",
    "execution_fence",
    "session_id",
    "operation_key",
    "call_id",
    "sandbox_id",
    "task_id",
)
"""The fields of a result that locate its task (its locator), kept with an answer."""


class RecordError(Exception):
    """The ownership record cannot be used: unreachable, unreadable, or
    holding a row that is not an ownership record (a table edited by hand).
    The message says which and where, never a value of a row.

    The port treats it like any failure of the record: a write that fails
    means the start never leaves; a read that fails means ``uncertain``,
    never a launch."""


@runtime_checkable
class OwnershipRecord(Protocol):
    """A durable store of the commands a harness launched, shared by its
    ports, its restarts and (for a database) its whole fleet.

    ``remember`` and ``resolve`` have the signatures of the ports'
    ``remember_owned_command`` and ``resolve_owned_command`` callbacks.
    Every method raises (any exception; the stores here raise
    :class:`RecordError`) when it cannot do what it says; none retries a
    write behind the caller's back except as stated.

    A record may also offer ``session_sandbox(session_id, owner) -> str |
    None``: the sandbox the session's launches went to (the latest row's),
    or ``None``. Both stores here do. A port asks it once, before its first
    ``Ensure``, and hands the answer to a backend that takes it
    (``adopt_session``): a restarted harness then never makes a second
    sandbox for a session whose sandbox is gone (it could relaunch what
    ran there; ``docs/explanation/limits.md``)."""

    def remember(self, request: ToolRequest, owned: OwnedCommand) -> OwnedCommand:
        """Keep ``owned`` (task ``owned.task_id`` of ``request.session_id``)
        durably before returning, merged with the row already there by
        :func:`merge_owned` in one transaction, and return the row as stored."""
        ...

    def resolve(self, request: ToolRequest, task_id: str) -> OwnedCommand | None:
        """The row of ``task_id`` in ``request.session_id``, or ``None``."""
        ...

    def note(self, answer: Answer) -> None:
        """Keep the last answer of a task an operator must see: an
        ``uncertain`` one is kept (replacing the one before); any other
        settles an ``uncertain`` one kept before, and is otherwise dropped
        (so a call that went well costs at most one cheap statement)."""
        ...

    def unresolved(self, *, limit: int = 1000) -> list[Answer]:
        """Up to ``limit`` tasks whose last answer was ``uncertain``, oldest
        first; a stored row that is not an answer comes as one whose
        :attr:`Answer.unreadable` says why (it never hides the others)."""
        ...

    def close(self) -> None:
        """Release connections; the record is not used afterwards."""
        ...


def merge_owned(known: OwnedCommand | None, new: OwnedCommand) -> OwnedCommand:
    """The row a record keeps when ``new`` is written over ``known``: the
    port's own rule, :func:`sandrail.core.merged` (the at-most-once claim's,
    :mod:`sandrail.core._claim`), so a record and a port agree. Once a start
    of the task may have left, its ledger epoch (in the same sandbox) and its
    launch digest stay (C2, C3), and ``launched`` never goes back to false."""
    return merged(known, new)


def owned_from_row(task_id: str, row: Mapping[str, Any], where: str) -> OwnedCommand:
    """An :class:`~sandrail.core.OwnedCommand` from a stored row, checked
    field by field: a row edited into something else is a
    :class:`RecordError` (the port then answers ``uncertain``), never a
    record that could let a start through."""
    operation_key = row.get("operation_key")
    launched = row.get("launched")
    if isinstance(launched, int) and not isinstance(launched, bool) and launched in (0, 1):
        launched = bool(launched)  # SQLite keeps booleans as 0 and 1
    fields = {
        "sandbox_id": row.get("sandbox_id"),
        "ledger_epoch": row.get("ledger_epoch"),
        "launch_digest": row.get("launch_digest"),
    }
    bad = [name for name, value in fields.items() if not isinstance(value, str | None)]
    if not isinstance(operation_key, str) or not operation_key:
        bad.append("operation_key")
    if not isinstance(launched, bool):
        bad.append("launched")
    if not _TASK_ID.fullmatch(task_id):
        bad.append("task_id")
    if bad:
        raise RecordError(
            f"{where}: the row of a task is not an ownership record ({', '.join(bad)})"
        )
    assert isinstance(operation_key, str)
    assert isinstance(launched, bool)
    return OwnedCommand(
        task_id=task_id,
        operation_key=operation_key,
        sandbox_id=fields["sandbox_id"],
        launched=launched,
        ledger_epoch=fields["ledger_epoch"],
        launch_digest=fields["launch_digest"],
    )


@attrs.frozen(kw_only=True)
class Answer:
    """The last answer a task got: its status, why, and the locator that
    finds it again (what the result showed, so nothing secret: C17)."""

    session_id: str
    task_id: str
    status: str
    """``ok``, ``error`` or ``uncertain``."""
    error_type: str | None
    tool: str
    owner: Mapping[str, Any]
    """``{"agent_id": ...}`` or ``{"scope": {...}}``: whom the task belongs to."""
    locator: Mapping[str, Any]
    """The result's locator fields (:data:`LOCATOR_FIELDS` it carried)."""
    updated_at: str | None = None
    """When the record kept it (ISO 8601, UTC), as the store reports it."""
    unreadable: str | None = None
    """Why the stored row is not an answer (edited by hand, damaged), or
    ``None``. Such a row is still listed, by its session and task ids (as
    far as they are text), so one bad row never hides the others."""

    @classmethod
    def of(cls, request: ToolRequest, owner: Owner, result: ToolResult) -> Answer | None:
        """The answer ``result`` gives the task it names, or ``None`` when it
        names none (a refusal before the task was known, an approval still
        pending)."""
        content = result.content
        task = content.get("task_id")
        if (
            result.status not in ("ok", "error", "uncertain")
            or not isinstance(task, str)
            or not _TASK_ID.fullmatch(task)
            or not isinstance(request.session_id, str)
            or not isinstance(request.identity, AgentIdentity | NativeIdentity)
        ):
            return None
        error_type = content.get("error_type")
        return cls(
            session_id=request.session_id,
            task_id=task,
            status=result.status,
            error_type=error_type if isinstance(error_type, str) else None,
            tool=str(request.call.name),
            owner=owner_json(owner),
            locator={key: content[key] for key in LOCATOR_FIELDS if key in content},
        )

    def owner_object(self) -> Owner:
        """The owner as the port takes it; :class:`RecordError` for a stored
        owner that is neither shape, or an unreadable row."""
        if self.unreadable is not None:
            raise RecordError(f"task {self.task_id}: {self.unreadable}")
        agent = self.owner.get("agent_id")
        if isinstance(agent, str) and set(self.owner) == {"agent_id"}:
            return AgentOwner(agent_id=agent)
        scope = self.owner.get("scope")
        if isinstance(scope, Mapping) and set(self.owner) == {"scope"}:
            return NativeOwner(scope=dict(scope))
        raise RecordError(f"task {self.task_id}: the stored owner is not an owner")

    def identity(self) -> AgentIdentity | NativeIdentity:
        """The identity the task's calls carried, from the locator;
        :class:`RecordError` when the locator lacks it."""
        owner = self.owner_object()
        if isinstance(owner, AgentOwner):
            return AgentIdentity(agent_id=owner.agent_id)
        found = self.locator
        try:
            return NativeIdentity(
                scope=dict(owner.scope),
                run_id=found["run_id"],
                turn_id=found["turn_id"],
                build_id=found["build_id"],
                task_chain_id=found["task_chain_id"],
                parent_run_id=found.get("parent_run_id"),
                execution_fence=found["execution_fence"],
            )
        except KeyError as missing:
            raise RecordError(
                f"task {self.task_id}: the locator lacks {missing.args[0]!r}"
            ) from None

    def to_json(self) -> dict[str, Any]:
        """Plain JSON data (what ``sandrail uncertain --json`` prints)."""
        return {
            "session_id": self.session_id,
            "task_id": self.task_id,
            "status": self.status,
            "error_type": self.error_type,
            "tool": self.tool,
            "owner": dict(self.owner),
            "locator": dict(self.locator),
            "updated_at": self.updated_at,
            **({"unreadable": self.unreadable} if self.unreadable is not None else {}),
        }


def owner_json(owner: Owner) -> dict[str, Any]:
    if isinstance(owner, AgentOwner):
        return {"agent_id": owner.agent_id}
    return {"scope": dict(owner.scope)}


def dumps(value: Mapping[str, Any]) -> str:
    """Canonical JSON text of ``value`` (how answers are stored)."""
    return canonical_json(dict(value)).decode("utf-8")


def answer_from_row(row: Mapping[str, Any]) -> Answer:
    """An :class:`Answer` from a stored row; for a row that is not one, an
    answer that says so (:attr:`Answer.unreadable`), named by its keys."""
    updated = row.get("updated_at")
    problem = _unreadable(row)
    if problem is not None:
        return Answer(
            session_id=_text(row.get("session_id")),
            task_id=_text(row.get("task_id")),
            status="uncertain",
            error_type=None,
            tool=_text(row.get("tool")),
            owner={},
            locator={},
            updated_at=None if updated is None else str(updated),
            unreadable=problem,
        )
    owner = json.loads(row["owner"])
    locator = json.loads(row["locator"])
    fields = {name: row[name] for name in ("session_id", "task_id", "status", "tool")}
    error_type = row["error_type"]
    return Answer(
        session_id=fields["session_id"],
        task_id=fields["task_id"],
        status=fields["status"],
        error_type=error_type,
        tool=fields["tool"],
        owner=owner,
        locator=locator,
        updated_at=None if updated is None else str(updated),
    )


def _unreadable(row: Mapping[str, Any]) -> str | None:
    """Why ``row`` is not an answer (naming the column, never its value), or ``None``."""
    for name in ("session_id", "task_id", "status", "tool"):
        if not isinstance(row.get(name), str):
            return f"the answer row's {name} is not text"
    if row.get("error_type") is not None and not isinstance(row.get("error_type"), str):
        return "the answer row's error_type is not text"
    for name in ("owner", "locator"):
        try:
            value = json.loads(row[name])
        except (KeyError, TypeError, ValueError, RecursionError):
            return f"the answer row's {name} is not JSON"
        if not isinstance(value, dict):
            return f"the answer row's {name} is not a JSON object"
    return None


def _text(value: object) -> str:
    return value if isinstance(value, str) else "(not text)"
