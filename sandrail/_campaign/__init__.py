"""The fault campaign behind ``sandrail simulate``: every single-fault plan,
seeded random multi-fault schedules and mutants of the core, each call judged
against the simulator's ground truth (DESIGN §4, §6)."""

from ._checks import CHECKS, CONTRACT_LINES, Violation, judge
from ._mutants import MUTANTS, Mutant
from ._plans import Schedule, Step, Workload, random_schedule, single_fault_plans, workloads
from ._runner import (
    DEFAULT_SCHEDULES,
    STATUSES,
    UNREACHABLE,
    CampaignReport,
    Failure,
    MutantResult,
    PlanOutcome,
    run_campaign,
    run_mutant,
    run_schedule,
    run_workload,
    total_steps,
)
from ._world import CallRecord, World

__all__ = [
    "CHECKS",
    "CONTRACT_LINES",
    "DEFAULT_SCHEDULES",
    "MUTANTS",
    "STATUSES",
    "UNREACHABLE",
    "CallRecord",
    "CampaignReport",
    "Failure",
    "Mutant",
    "MutantResult",
    "PlanOutcome",
    "Schedule",
    "Step",
    "Violation",
    "Workload",
    "World",
    "judge",
    "random_schedule",
    "run_campaign",
    "run_mutant",
    "run_schedule",
    "run_workload",
    "single_fault_plans",
    "total_steps",
    "workloads",
]
