"""The campaign: every single-fault plan, random schedules, mutants; the
report; shrinking and recording a failing plan.

Strategy: a plan runs in a fresh :class:`~._world.World`; the checker judges
it once it has ended. A failing plan is shrunk (schedules drop faults and late
deliveries while the same contract line still breaks), then run once more
with every port recording, so ``sandrail replay`` re-runs exactly what broke.
"""

from __future__ import annotations

import tempfile
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

import attrs

import sandrail
from sandrail.interpreters.simulator import FaultKind, FaultPlan

from ._checks import CONTRACT_LINES, Violation, judge
from ._mutants import MUTANTS, Mutant
from ._plans import Schedule, Step, Workload, random_schedule, single_fault_plans, workloads
from ._world import FOREIGN_SESSION, SESSION, PortHandle, World

__all__ = [
    "DEFAULT_SCHEDULES",
    "STATUSES",
    "UNREACHABLE",
    "CampaignReport",
    "Failure",
    "MutantResult",
    "PlanOutcome",
    "run_campaign",
    "run_schedule",
    "run_workload",
]

DEFAULT_SCHEDULES = 3_000
STATUSES = ("ok", "error", "uncertain")

UNREACHABLE: dict[tuple[str, str], str] = {
    (kind.value, "ok"): "a struck sandbox effect fails or flips the harness: never ok"
    for kind in FaultKind
}
"""Coverage cells (fault kind, status of the struck call) no plan can reach, and why."""


@attrs.frozen
class PlanOutcome:
    """What one plan did: its world (for inspection), calls and violations."""

    world: World
    violations: tuple[Violation, ...]


@attrs.frozen
class Failure:
    """A violation with a clean core: the minimal plan that shows it, and the
    cassettes that replay it."""

    violation: Violation
    plan: str
    recordings: tuple[Path, ...]


@attrs.frozen
class MutantResult:
    name: str
    description: str
    expected: str
    caught_by: str | None
    plans: int
    plan: str | None

    @property
    def caught(self) -> bool:
        return self.caught_by is not None


@attrs.define
class CampaignReport:
    seed: int
    schedules: int
    single_fault_plans: int = 0
    plans: int = 0
    calls: int = 0
    violations: Counter[str] = attrs.Factory(Counter)
    coverage: dict[str, Counter[str]] = attrs.Factory(dict)
    """Fault kind -> status of the call it struck -> count."""
    reconciled: dict[str, Counter[str]] = attrs.Factory(dict)
    """Fault kind -> status of the retry with the same key -> count (single-fault plans)."""
    mutants: list[MutantResult] = attrs.Factory(list)
    failures: list[Failure] = attrs.Factory(list)
    elapsed: float = 0.0

    @property
    def passed(self) -> bool:
        """No violation, and mutants ran and every one was caught (a run
        without mutants cannot pass: it has not shown the checks can fail)."""
        caught = bool(self.mutants) and all(m.caught for m in self.mutants)
        return not sum(self.violations.values()) and caught

    def to_json(self) -> dict[str, Any]:
        return {
            "passed": self.passed,
            "seed": self.seed,
            "schedules": self.schedules,
            "single_fault_plans": self.single_fault_plans,
            "plans": self.plans,
            "calls": self.calls,
            "violations": {line: self.violations.get(line, 0) for line in CONTRACT_LINES},
            "coverage": {
                kind.value: {
                    status: _cell(self.coverage, kind.value, status) for status in STATUSES
                }
                for kind in FaultKind
            },
            "reconciled": {
                kind.value: {
                    status: self.reconciled.get(kind.value, Counter()).get(status, 0)
                    for status in STATUSES
                }
                for kind in FaultKind
            },
            "mutants": {
                "caught": sum(m.caught for m in self.mutants),
                "total": len(self.mutants),
                "results": [
                    {
                        "name": m.name,
                        "description": m.description,
                        "expected": m.expected,
                        "caught_by": m.caught_by,
                        "plans": m.plans,
                        "plan": m.plan,
                    }
                    for m in self.mutants
                ],
            },
            "failures": [
                {
                    "line": f.violation.line,
                    "call": f.violation.call,
                    "message": f.violation.message,
                    "plan": f.plan,
                    "recordings": [str(path) for path in f.recordings],
                }
                for f in self.failures
            ],
            "elapsed_seconds": round(self.elapsed, 3),
        }


def _cell(coverage: dict[str, Counter[str]], kind: str, status: str) -> int | str:
    count = coverage.get(kind, Counter()).get(status, 0)
    if not count and (kind, status) in UNREACHABLE:
        return "unreachable: " + UNREACHABLE[(kind, status)]
    return count


# ---------------------------------------------------------------------------
# Running plans


class _Ports:
    """The ports of one run: created on first use, dropped on a restart."""

    def __init__(self, world: World, mode: Any) -> None:
        self.world = world
        self.mode = mode
        self._ports: dict[str, PortHandle] = {}

    def get(self, name: str) -> PortHandle:
        if name not in self._ports:
            session = FOREIGN_SESSION if name == "foreign" else SESSION
            self._ports[name] = self.world.port(
                mode=self.mode, tools="code" if name == "code" else "command", session_id=session
            )
        return self._ports[name]

    def restart(self) -> None:
        """The harness restarts: new ports, and a new backend that has not
        seen which starts the old one sent."""
        self._ports.clear()
        self.world.sim.forget_sent()


def _arguments(world: World, step: Step, handle: PortHandle) -> dict[str, Any]:
    arguments = dict(step.arguments)
    if step.task_of is not None:
        owner = handle.owner
        task = sandrail.task_id(SESSION, owner, step.task_of)
        arguments["task_id"] = task
        if step.follow and task in world.read_cursors:
            arguments["stdout_cursor"], arguments["stderr_cursor"] = world.read_cursors[task]
    return arguments


def _execute(world: World, mode: Any, steps: Sequence[Step]) -> None:
    ports = _Ports(world, mode)
    for step in steps:
        if step.action == "deliver":
            world.deliver_held()
        elif step.action == "restart":
            ports.restart()
        elif step.action == "advance":
            world.sim.advance(step.seconds)
        elif step.action == "concurrent":
            handle = world.port(mode=mode, tools="command", asynchronous=True)
            records = [
                world.prepare(
                    handle,
                    step.tool,
                    step.arguments,
                    step.key,
                    label=f"{step.label} (duplicate {n})",
                    fence=step.fence,
                    concurrent=True,
                )
                for n in (1, 2)
            ]
            world.call_concurrently(handle, records)
        else:
            handle = ports.get(step.port)
            record = world.prepare(
                handle,
                step.tool,
                _arguments(world, step, handle),
                step.key,
                label=step.label,
                fence=step.fence,
                call_id=step.call_id,
            )
            world.call(handle, record)


def run_workload(
    workload: Workload, plan: FaultPlan, *, record_dir: Path | None = None
) -> PlanOutcome:
    """Run ``workload`` under ``plan`` and judge it."""
    world = World(plan, record_dir=record_dir)
    try:
        _execute(world, workload.mode, workload.steps)
        violations = judge(world)
    finally:
        world.close()
    return PlanOutcome(world, tuple(violations))


def run_schedule(schedule: Schedule, *, record_dir: Path | None = None) -> PlanOutcome:
    """Run a random schedule and judge it."""
    world = World(schedule.plan, deliver_at=schedule.deliver_at, record_dir=record_dir)
    try:
        _execute(world, schedule.mode, schedule.steps)
        violations = judge(world)
    finally:
        world.close()
    return PlanOutcome(world, tuple(violations))


def slots_of(workload: Workload) -> dict[str, int]:
    """Effect name -> how many times a fault-free run of ``workload`` sends it."""
    world = run_workload(workload, FaultPlan()).world
    return dict(Counter(type(effect).__name__ for effect in world.sim.effects_seen))


def _all_workloads() -> tuple[Workload, ...]:
    return workloads("agent") + workloads("native")


def single_fault_runs(
    chosen: Iterable[Workload] | None = None,
) -> Iterator[tuple[Workload, FaultPlan]]:
    """Every (workload, single-fault plan) pair, fault-free runs first."""
    for workload in _all_workloads() if chosen is None else chosen:
        yield workload, FaultPlan()
        for plan in single_fault_plans(slots_of(workload)):
            yield workload, plan


# ---------------------------------------------------------------------------
# Minimal failing plans


def describe_plan(workload: Workload, plan: FaultPlan) -> str:
    faults = ", ".join(
        f"Fault(effect={f.effect!r}, occurrence={f.occurrence}, kind=FaultKind.{f.kind.name}, "
        f"when={f.when!r})"
        for f in plan.faults
    )
    return (
        f"workload {workload.mode}/{workload.name!r}: FaultPlan(({faults}{',' if faults else ''}))"
    )


def describe_schedule(schedule: Schedule) -> str:
    lines = [f"schedule (seed {schedule.seed}, {schedule.mode} owner)"]
    lines.append(f"  faults: {schedule.plan.faults!r}")
    lines.append(f"  held requests arrive before effects: {sorted(schedule.deliver_at)}")
    for step in schedule.steps:
        arguments = dict(step.arguments)
        if "env" in arguments:
            arguments["env"] = dict.fromkeys(arguments["env"], "[redacted]")
        if step.action == "call":
            lines.append(
                f"  {step.label}: {step.tool} {arguments} key={step.key!r}"
                + (f" task_of={step.task_of!r}" if step.task_of else "")
                + (f" fence={step.fence}" if schedule.mode == "native" else "")
            )
        else:
            lines.append(f"  {step.label}: {step.action} {step.tool} {arguments}".rstrip())
    return "\n".join(lines)


def shrink_schedule(schedule: Schedule, line: str) -> Schedule:
    """Drop faults and late deliveries one at a time while ``line`` still breaks."""

    def fails(candidate: Schedule) -> bool:
        return any(v.line == line for v in run_schedule(candidate).violations)

    current = schedule
    changed = True
    while changed:
        changed = False
        for fault in current.plan.faults:
            rest = tuple(f for f in current.plan.faults if f is not fault)
            candidate = attrs.evolve(current, plan=FaultPlan(rest))
            if fails(candidate):
                current, changed = candidate, True
                break
        for point in sorted(current.deliver_at):
            candidate = attrs.evolve(current, deliver_at=current.deliver_at - {point})
            if fails(candidate):
                current, changed = candidate, True
                break
    return current


def _record_dir(base: Path | None) -> Path:
    if base is None:
        return Path(tempfile.mkdtemp(prefix="sandrail-campaign-"))
    base.mkdir(parents=True, exist_ok=True)
    return Path(tempfile.mkdtemp(prefix="failure-", dir=base))


# ---------------------------------------------------------------------------
# Mutants


def mutant_runs() -> Iterator[tuple[Workload, FaultPlan]]:
    """The smaller set mutants run against: fault-free runs of every workload,
    then the single-fault plans that strike Start."""
    chosen = _all_workloads()
    for workload in chosen:
        yield workload, FaultPlan()
    for workload in chosen:
        for plan in single_fault_plans({"Start": 1}):
            yield workload, plan


def run_mutant(mutant: Mutant) -> MutantResult:
    """Run ``mutant`` until a check catches it (or the subset runs out)."""
    plans = 0
    with mutant.patch():
        for workload, plan in mutant_runs():
            plans += 1
            violations = run_workload(workload, plan).violations
            if violations:
                lines = {v.line for v in violations}
                caught_by = mutant.expected if mutant.expected in lines else sorted(lines)[0]
                return MutantResult(
                    mutant.name,
                    mutant.description,
                    mutant.expected,
                    caught_by,
                    plans,
                    describe_plan(workload, plan),
                )
    return MutantResult(mutant.name, mutant.description, mutant.expected, None, plans, None)


# ---------------------------------------------------------------------------
# The campaign


def total_steps(schedules: int) -> int:
    """How many progress steps :func:`run_campaign` reports."""
    return sum(1 for _ in single_fault_runs()) + schedules + len(MUTANTS)


def run_campaign(
    *,
    seed: int = 0,
    schedules: int = DEFAULT_SCHEDULES,
    mutants: bool = True,
    failures_dir: Path | None = None,
    advance: Callable[[int], None] = lambda n: None,
) -> CampaignReport:
    """Run the whole campaign; ``advance(n)`` is told of each finished step."""
    started = time.perf_counter()
    report = CampaignReport(seed=seed, schedules=schedules)
    for workload, plan in single_fault_runs():
        outcome = run_workload(workload, plan)
        report.single_fault_plans += 1
        _tally(report, outcome, single=True)
        new = _first_new(report, outcome.violations)
        if new is not None:
            record_dir = _record_dir(failures_dir)
            run_workload(workload, plan, record_dir=record_dir)
            report.failures.append(
                Failure(new, describe_plan(workload, plan), tuple(sorted(record_dir.iterdir())))
            )
        advance(1)
    for index in range(schedules):
        schedule = random_schedule(seed, index)
        outcome = run_schedule(schedule)
        _tally(report, outcome, single=False)
        first = _first_new(report, outcome.violations)
        if first is not None:
            minimal = shrink_schedule(schedule, first.line)
            record_dir = _record_dir(failures_dir)
            rerun = run_schedule(minimal, record_dir=record_dir)
            shown = next((v for v in rerun.violations if v.line == first.line), first)
            report.failures.append(
                Failure(shown, describe_schedule(minimal), tuple(sorted(record_dir.iterdir())))
            )
        advance(1)
    if mutants:
        for mutant in MUTANTS:
            report.mutants.append(run_mutant(mutant))
            advance(1)
    report.elapsed = time.perf_counter() - started
    return report


def _first_new(report: CampaignReport, violations: Sequence[Violation]) -> Violation | None:
    """The first violation of a contract line no failure shows yet (one
    minimal plan and recording per line is enough to reproduce it)."""
    shown = {failure.violation.line for failure in report.failures}
    return next((v for v in violations if v.line not in shown), None)


def _tally(report: CampaignReport, outcome: PlanOutcome, *, single: bool) -> None:
    report.plans += 1
    world = outcome.world
    report.calls += len(world.calls)
    for violation in outcome.violations:
        report.violations[violation.line] += 1
    kinds: set[str] = set()
    for record in world.calls:
        assert record.result is not None
        for fault in record.faults:
            kinds.add(fault.kind.value)
            report.coverage.setdefault(fault.kind.value, Counter())[record.result.status] += 1
    if single:
        for record in world.calls:
            if record.label == "retry" and record.result is not None:
                for kind in kinds:
                    report.reconciled.setdefault(kind, Counter())[record.result.status] += 1
