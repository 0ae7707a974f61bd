"""Faults of the ownership record: a database that is down, drops the
connection after a write, or answers too slowly (``docs/howto/records-and-fleet.md``).

A :class:`RecordFaultPlan` strikes the ``occurrence``-th operation (0-based,
reads and writes counted together, in a world's life) on the world's durable
ownership record, with one of :data:`RECORD_FAULT_KINDS`:

================  ===============================  =========================
kind              what the database did            what the port sees
================  ===============================  =========================
``record_down``   nothing (unreachable)            the read or write raises
``record_dropped``  the write committed, then the  the write raises
                  connection dropped before the
                  answer (a read: nothing)
``record_slow``   nothing before the timeout       time passes (the record's
                  (the statement was cancelled)    timeout), then it raises
================  ===============================  =========================

Each kind is transient: the next operation answers again, so a retry with
the same operation key must be decisive. :func:`check_record_faults` is the
judge's check of what a call did after its record failed (C2, C5).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Final, Literal

import attrs

from sandrail.core import OwnedCommand, Start, ToolRequest

from ._calls import CallRecord
from ._violation import Violation

if TYPE_CHECKING:
    from ._world import World

__all__ = [
    "RECORD_FAULT_KINDS",
    "RECORD_TIMEOUT_SECONDS",
    "FaultyRecord",
    "RecordFault",
    "RecordFaultError",
    "RecordFaultPlan",
    "check_record_faults",
]

RecordFaultKind = Literal["record_down", "record_dropped", "record_slow"]
RECORD_FAULT_KINDS: Final[tuple[RecordFaultKind, ...]] = (
    "record_down",
    "record_dropped",
    "record_slow",
)
RECORD_TIMEOUT_SECONDS: Final = 10.0
"""How long a slow record keeps the call waiting before it fails."""


class RecordFaultError(ConnectionError):
    """What a struck record operation raises (a database driver's error)."""


@attrs.frozen(kw_only=True)
class RecordFault:
    occurrence: int = attrs.field(validator=attrs.validators.ge(0))
    kind: RecordFaultKind = attrs.field(validator=attrs.validators.in_(RECORD_FAULT_KINDS))


@attrs.frozen
class RecordFaultPlan:
    """The record faults of one run; at most one per occurrence."""

    faults: tuple[RecordFault, ...] = ()

    def lookup(self, occurrence: int) -> RecordFault | None:
        return next((fault for fault in self.faults if fault.occurrence == occurrence), None)


class FaultyRecord:
    """``resolve`` / ``remember`` callbacks over ``store`` (the world's
    durable dict) that strike ``plan``; each fault that fires is noted on
    the call it struck (``CallRecord.record_faults``: operation, kind)."""

    def __init__(
        self,
        store: dict[tuple[str, str], OwnedCommand],
        plan: RecordFaultPlan,
        *,
        current: Callable[[], CallRecord | None],
        advance: Callable[[float], None] | None = None,
    ) -> None:
        self.store = store
        self.plan = plan
        self.operations = 0
        self._current = current
        self._advance = advance

    def _strike(self, operation: str) -> RecordFault | None:
        fault = self.plan.lookup(self.operations)
        self.operations += 1
        if fault is not None:
            record = self._current()
            if record is not None:
                record.record_faults.append((operation, fault.kind))
        return fault

    def callbacks(
        self, session_id: str
    ) -> tuple[
        Callable[[ToolRequest, str], OwnedCommand | None],
        Callable[[ToolRequest, OwnedCommand], None],
    ]:
        def resolve(request: ToolRequest, task: str) -> OwnedCommand | None:
            if self._strike("resolve") is not None:
                self._fail()
            return self.store.get((session_id, task))

        def remember(request: ToolRequest, owned: OwnedCommand) -> None:
            fault = self._strike("remember")
            if fault is not None and fault.kind == "record_dropped":
                self.store[(session_id, owned.task_id)] = owned  # committed, answer lost
            if fault is not None:
                self._fail()
            self.store[(session_id, owned.task_id)] = owned

        return resolve, remember

    def _fail(self) -> None:
        fault = self.plan.lookup(self.operations - 1)
        if fault is not None and fault.kind == "record_slow" and self._advance is not None:
            self._advance(RECORD_TIMEOUT_SECONDS)
        raise RecordFaultError("the ownership record did not answer")


def check_record_faults(world: World, record: CallRecord) -> Iterable[Violation]:
    """C2, C5: a launch whose record could not be read launches nothing (its
    answer is ``uncertain``); one whose record could not be written sends no
    start (the start never leaves)."""
    if not record.record_faults or not record.launches:
        return
    operations = {operation for operation, _ in record.record_faults}
    if "resolve" in operations and record.launched:
        yield Violation("C2", record.number, "launched though its record could not be read")
    if "remember" in operations and any(isinstance(e, Start) for e, _ in record.effects):
        yield Violation("C5", record.number, "sent a start though its record was not written")
