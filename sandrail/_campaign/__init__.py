"""The fault campaign behind ``sandrail simulate``: every single-fault plan,
seeded random multi-fault schedules and mutants of the core, each call judged
against the world's ground truth by :mod:`sandrail.testing`'s judge
(``docs/howto/campaign-in-ci.md``)."""

from sandrail.testing._execute import BUDGET, PlanOutcome, Retry, run_schedule, run_workload
from sandrail.testing._plans import (
    Schedule,
    Step,
    Workload,
    random_schedule,
    schedule_from,
    single_fault_plans,
    workloads,
)

from ._mutants import MUTANTS, Mutant
from ._report import (
    DECISIVE_GOAL,
    STATUSES,
    UNCERTAIN_RETRY_CLASSES,
    UNREACHABLE,
    CampaignReport,
    Failure,
    MergeError,
    MutantResult,
    merge_reports,
)
from ._runner import (
    DEFAULT_SCHEDULES,
    default_workers,
    run_campaign,
    run_mutant,
    single_fault_runs,
    total_steps,
)

__all__ = [
    "BUDGET",
    "DECISIVE_GOAL",
    "DEFAULT_SCHEDULES",
    "MUTANTS",
    "STATUSES",
    "UNCERTAIN_RETRY_CLASSES",
    "UNREACHABLE",
    "CampaignReport",
    "Failure",
    "MergeError",
    "Mutant",
    "MutantResult",
    "PlanOutcome",
    "Retry",
    "Schedule",
    "Step",
    "Workload",
    "default_workers",
    "merge_reports",
    "random_schedule",
    "run_campaign",
    "run_mutant",
    "run_schedule",
    "run_workload",
    "schedule_from",
    "single_fault_plans",
    "single_fault_runs",
    "total_steps",
    "workloads",
]
