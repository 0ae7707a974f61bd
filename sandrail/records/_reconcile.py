"""Unresolved outcomes, for an operator: list every task whose last answer
was ``uncertain``, and reconcile them by reading their state from the
sandbox, never by launching anything.

Strategy: reconciling a task is one ``read_command_output`` of it through an
ordinary port of its session and owner (rebuilt from the stored answer),
whose ownership check asks the record: so it reads only what the record says
was launched, and a read changes nothing in the sandbox. A task the record
holds no row of never had a start leave (the row is written before any
start), so its ``uncertain`` answer settles as never launched.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Literal

import attrs

import sandrail
from sandrail._ownership import Answer, OwnershipRecord, RecordError
from sandrail.core import ErrorCode, ToolCall, ToolRequest, ToolResult

__all__ = ["Reconciliation", "reconcile", "unresolved"]

Verdict = Literal["resolved", "never_launched", "still_uncertain"]


@attrs.frozen(kw_only=True)
class Reconciliation:
    """What reconciling one task found.

    ``verdict``: ``resolved`` (the sandbox showed its state: ``status``, and
    ``exit_code`` once it ended), ``never_launched`` (no start of it ever
    left: the record holds no row), or ``still_uncertain`` (``reason``
    says why: :data:`SANDBOX_GONE` when the read failed and the control
    plane shows the session without that sandbox, else the read's
    ``error_type``: its claim was lost, the read failed)."""

    answer: Answer
    verdict: Verdict
    status: str | None = None
    exit_code: int | None = None
    reason: str | None = None

    def to_json(self) -> dict[str, Any]:
        """The task's locator with the verdict, command status, exit code and
        reason, as ``sandrail uncertain --reconcile --json`` prints it."""
        return {
            **self.answer.to_json(),
            "verdict": self.verdict,
            "command_status": self.status,
            "exit_code": self.exit_code,
            "reason": self.reason,
        }


def unresolved(record: OwnershipRecord, *, limit: int = 1000) -> list[Answer]:
    """Every task (up to ``limit``) whose last answer was ``uncertain``,
    across all sessions and workers that share ``record``, oldest first."""
    return record.unresolved(limit=limit)


def reconcile(
    record: OwnershipRecord,
    backend: Callable[[Any], Any],
    *,
    limit: int = 1000,
    max_output_bytes: int = 24_000,
) -> list[Reconciliation]:
    """Read the state of each unresolved task (up to ``limit``) from the
    sandbox through ``backend`` and keep what was found as the task's last
    answer. Never starts, publishes or stops anything (only reads), so it is
    safe to run while workers run. A task whose stored answer cannot be used
    (hand-edited) stays ``still_uncertain`` with the reason; a record that
    cannot be read raises :class:`~sandrail.records.RecordError`."""
    found: list[Reconciliation] = []
    for answer in record.unresolved(limit=limit):
        found.append(_reconcile_one(record, backend, answer, max_output_bytes))
    return found


def _reconcile_one(
    record: OwnershipRecord,
    backend: Callable[[Any], Any],
    answer: Answer,
    max_output_bytes: int,
) -> Reconciliation:
    try:
        owner = answer.owner_object()
        identity = answer.identity()
    except RecordError as exc:
        return Reconciliation(answer=answer, verdict="still_uncertain", reason=str(exc))
    try:
        port = sandrail.command_tools(
            backend=backend,
            session_id=answer.session_id,
            owner=owner,
            authorize=lambda request: sandrail.ALLOW,
            assert_authority=lambda request: True,
            max_output_bytes=max_output_bytes,
            resolve_owned_command=record.resolve,
        )
    except (TypeError, ValueError) as exc:
        return Reconciliation(answer=answer, verdict="still_uncertain", reason=str(exc))
    request = ToolRequest(
        call=ToolCall(
            name="read_command_output",
            call_id="sandrail-reconcile",
            arguments={"task_id": answer.task_id, "max_bytes": 4},
        ),
        operation_key=f"sandrail-reconcile:{answer.task_id}",
        session_id=answer.session_id,
        definition=port.definition("read_command_output"),
        identity=identity,
    )
    result = port.execute_sync(request)
    reconciled = _verdict(record, answer, result)
    if reconciled.reason == ErrorCode.READ_FAILED.value and _gone(port, answer, identity):
        return attrs.evolve(reconciled, reason=SANDBOX_GONE)
    return reconciled


SANDBOX_GONE = "the sandbox is gone"
"""The reason of a task that stays uncertain because its sandbox is gone."""


def _gone(port: sandrail.ToolPort, answer: Answer, identity: Any) -> bool:
    """Whether the sandbox a task ran in is gone, as ``sandbox_status``
    (the control plane, never the sandbox) tells: the session has none
    ready, or the one ready is another. A status that cannot be read says
    nothing: the read's own reason stands."""
    request = ToolRequest(
        call=ToolCall(name="sandbox_status", call_id="sandrail-reconcile", arguments={}),
        operation_key=f"sandrail-reconcile-status:{answer.task_id}",
        session_id=answer.session_id,
        definition=port.definition("sandbox_status"),
        identity=identity,
    )
    status = port.execute_sync(request)
    if status.status != "ok":
        return False
    phase = status.content.get("sandbox_phase")
    wanted = answer.locator.get("sandbox_id")
    if phase in ("closed", "absent"):
        return True
    return (
        phase == "ready" and isinstance(wanted, str) and status.content.get("sandbox_id") != wanted
    )


def _verdict(record: OwnershipRecord, answer: Answer, result: ToolResult) -> Reconciliation:
    content = result.content
    error_type = content.get("error_type")
    if result.status == "ok":
        status = content.get("command_status")
        exit_code = content.get("exit_code")
        record.note(attrs.evolve(answer, status="ok", error_type=None))
        return Reconciliation(
            answer=answer,
            verdict="resolved",
            status=status if isinstance(status, str) else None,
            exit_code=exit_code if isinstance(exit_code, int) else None,
        )
    if result.status == "error" and error_type == ErrorCode.NOT_OWNED.value:
        # No row: the record is written before any start leaves, so none did.
        record.note(attrs.evolve(answer, status="error"))
        return Reconciliation(answer=answer, verdict="never_launched")
    reason = error_type if isinstance(error_type, str) else result.status
    return Reconciliation(answer=answer, verdict="still_uncertain", reason=reason)
