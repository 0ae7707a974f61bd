"""The campaign's faults of the ownership record: every workload
with one record operation struck by each kind of
:data:`~sandrail.testing._record_faults.RECORD_FAULT_KINDS` (a database
down, a connection dropped after a write, a slow one), judged like any plan;
a call the fault left ``uncertain`` is retried at once with the same key,
and that retry counts toward the decisive goal (the kinds are transient).
"""

from __future__ import annotations

import functools

from sandrail.interpreters.simulator import FaultPlan
from sandrail.testing._commands import SCRIPTS, SECRET
from sandrail.testing._execute import PlanOutcome, run_and_judge
from sandrail.testing._plans import Workload, workloads
from sandrail.testing._record_faults import RECORD_FAULT_KINDS, RecordFault, RecordFaultPlan
from sandrail.testing._world import World

__all__ = ["RECORD_KINDS", "describe_record_plan", "record_fault_runs", "run_record_plan"]

RECORD_KINDS: tuple[str, ...] = RECORD_FAULT_KINDS


def run_record_plan(workload: Workload, fault: RecordFault | None) -> PlanOutcome:
    """Run ``workload`` with ``fault`` struck on its durable record, and judge it."""
    world = World.simulated(FaultPlan(), scripts=SCRIPTS, secrets=[SECRET])
    world.strike_record(RecordFaultPlan(() if fault is None else (fault,)))
    try:
        return run_and_judge(world, workload)
    finally:
        world.close()


def _operations(workload: Workload) -> int:
    """How many record operations a fault-free run of ``workload`` makes."""
    outcome = run_record_plan(workload, None)
    assert outcome.world.faulty_record is not None
    return outcome.world.faulty_record.operations


@functools.cache
def record_fault_runs() -> tuple[tuple[Workload, RecordFault], ...]:
    """Every (workload, record fault) plan: each operation x each kind."""
    found: list[tuple[Workload, RecordFault]] = []
    for workload in workloads("agent") + workloads("native"):
        for occurrence in range(_operations(workload)):
            for kind in RECORD_FAULT_KINDS:
                found.append((workload, RecordFault(occurrence=occurrence, kind=kind)))
    return tuple(found)


def describe_record_plan(workload: Workload, fault: RecordFault) -> str:
    return (
        f"workload {workload.mode}/{workload.name!r}: "
        f"RecordFault(occurrence={fault.occurrence}, kind={fault.kind!r})"
    )
