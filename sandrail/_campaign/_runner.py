"""The campaign: every single-fault plan, random schedules, mutants; run in
worker processes and shards; shrinking and recording a failing plan.

Strategy: the campaign is a fixed list of independent items (each mutant,
each single-fault plan, each schedule), numbered in one order. ``--shard
I/N`` takes every N-th item from the I-th, so shards are balanced and
together cover the list exactly once; within a shard, worker processes take
chunks of items and send back partial reports, which add up (counts are
sums, one failure per contract line is kept). A failing plan is shrunk
(schedules drop faults and late deliveries while the same contract line
still breaks), then run once more with every port recording, so
``sandrail replay`` re-runs exactly what broke.
"""

from __future__ import annotations

import functools
import multiprocessing
import os
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import Literal

import attrs

from sandrail.interpreters.simulator import FaultPlan
from sandrail.testing._execute import PlanOutcome, run_schedule, run_workload
from sandrail.testing._faults import TRANSIENT_KINDS
from sandrail.testing._judge import Violation
from sandrail.testing._plans import (
    Schedule,
    Workload,
    random_schedule,
    single_fault_plans,
    workloads,
)

from ._mutants import MUTANTS, Mutant
from ._records import describe_record_plan, record_fault_runs, run_record_plan
from ._report import CampaignReport, Failure, MutantResult

__all__ = [
    "DEFAULT_SCHEDULES",
    "default_workers",
    "describe_plan",
    "describe_schedule",
    "run_campaign",
    "run_mutant",
    "single_fault_runs",
    "slots_of",
    "total_steps",
]

DEFAULT_SCHEDULES = 3_000
_CHUNK = 16

ItemKind = Literal["mutant", "single", "record", "schedule"]
Item = tuple[ItemKind, int]


def default_workers() -> int:
    """The cores this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not Linux
        return os.cpu_count() or 1


# ---------------------------------------------------------------------------
# What the campaign runs


def slots_of(workload: Workload) -> dict[str, int]:
    """Effect name -> how many times a fault-free run of ``workload`` sends it."""
    world = run_workload(workload, FaultPlan()).world
    assert world.sim is not None
    return dict(Counter(type(effect).__name__ for effect in world.sim.effects_seen))


def _all_workloads() -> tuple[Workload, ...]:
    return workloads("agent") + workloads("native")


@functools.cache
def _single_runs() -> tuple[tuple[Workload, FaultPlan], ...]:
    return tuple(single_fault_runs())


def single_fault_runs(
    chosen: Iterable[Workload] | None = None,
) -> Iterator[tuple[Workload, FaultPlan]]:
    """Every (workload, single-fault plan) pair, fault-free runs first."""
    for workload in _all_workloads() if chosen is None else chosen:
        yield workload, FaultPlan()
        for plan in single_fault_plans(slots_of(workload)):
            yield workload, plan


def _items(schedules: int, mutants: bool) -> list[Item]:
    """Every item of the campaign, in its one order (mutants first: they take
    longest, so they must not be left for the end)."""
    found: list[Item] = []
    if mutants:
        found += [("mutant", index) for index in range(len(MUTANTS))]
    found += [("single", index) for index in range(len(_single_runs()))]
    found += [("record", index) for index in range(len(record_fault_runs()))]
    found += [("schedule", index) for index in range(schedules)]
    return found


def _shard_items(items: Sequence[Item], shard: tuple[int, int]) -> list[Item]:
    index, count = shard
    return [item for number, item in enumerate(items) if number % count == index]


def total_steps(schedules: int, *, mutants: bool = True, shard: tuple[int, int] = (0, 1)) -> int:
    """How many progress steps :func:`run_campaign` reports."""
    return len(_shard_items(_items(schedules, mutants), shard))


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


def _undecided(outcome: PlanOutcome) -> bool:
    """A retry after a transient fault that stayed uncertain."""
    transient = {kind.value for kind in TRANSIENT_KINDS}
    return any(r.kind in transient and r.status == "uncertain" for r in outcome.retries)


def run_mutant(mutant: Mutant) -> MutantResult:
    """Run ``mutant`` until a check catches it (or the subset runs out)."""
    plans = 0
    with mutant.patch():
        for workload, plan in mutant_runs():
            plans += 1
            outcome = run_workload(workload, plan)
            lines = {v.line for v in outcome.violations}
            if _undecided(outcome):
                lines.add("decisive")
            if lines:
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
# Running items

_SHOWN: set[str] = set()
"""Contract lines this process already shrank and recorded a failure for."""


def _first_to_show(violations: Sequence[Violation]) -> Violation | None:
    """The first violation of a contract line no failure of this process
    shows yet (one minimal plan and recording per line is enough), its line
    now counted as shown: the caller records the failure that shows it."""
    new = next((v for v in violations if v.line not in _SHOWN), None)
    if new is not None:
        _SHOWN.add(new.line)
    return new


def _tally_single(report: CampaignReport, outcome: PlanOutcome) -> Violation | None:
    """Count and tally one single-fault plan; its :func:`_first_to_show` violation."""
    report.single_fault_plans += 1
    _tally(report, outcome)
    return _first_to_show(outcome.violations)


def _tally(report: CampaignReport, outcome: PlanOutcome) -> None:
    report.plans += 1
    world = outcome.world
    report.calls += len(world.calls)
    for violation in outcome.violations:
        report.violations[violation.line] += 1
    for record in world.calls:
        assert record.result is not None
        for fault in record.faults:
            report.coverage.setdefault(fault.kind.value, Counter())[record.result.status] += 1
        for _, kind in record.record_faults:
            report.coverage.setdefault(kind, Counter())[record.result.status] += 1
    transient = {kind.value for kind in TRANSIENT_KINDS}
    for retry in outcome.retries:
        report.count_retry(retry, transient)


def _run_item(report: CampaignReport, item: Item, failures_dir: Path | None) -> None:
    kind, index = item
    if kind == "mutant":
        report.mutants.append(run_mutant(MUTANTS[index]))
        return
    if kind == "record":
        workload, fault = record_fault_runs()[index]
        new = _tally_single(report, run_record_plan(workload, fault))
        if new is not None:
            report.failures.append(Failure(new, describe_record_plan(workload, fault), ()))
        return
    if kind == "single":
        workload, plan = _single_runs()[index]
        new = _tally_single(report, run_workload(workload, plan))
        if new is not None:
            record_dir = _record_dir(failures_dir)
            run_workload(workload, plan, record_dir=record_dir)
            report.failures.append(
                Failure(new, describe_plan(workload, plan), tuple(sorted(record_dir.iterdir())))
            )
        return
    schedule = random_schedule(report.seed, index)
    outcome = run_schedule(schedule)
    _tally(report, outcome)
    first = _first_to_show(outcome.violations)
    if first is not None:
        minimal = shrink_schedule(schedule, first.line)
        record_dir = _record_dir(failures_dir)
        rerun = run_schedule(minimal, record_dir=record_dir)
        shown = next((v for v in rerun.violations if v.line == first.line), first)
        report.failures.append(
            Failure(shown, describe_schedule(minimal), tuple(sorted(record_dir.iterdir())))
        )


@attrs.frozen
class _Chunk:
    seed: int
    schedules: int
    items: tuple[Item, ...]
    failures_dir: Path | None


def _run_chunk(chunk: _Chunk) -> tuple[int, CampaignReport]:
    report = CampaignReport(seed=chunk.seed, schedules=chunk.schedules)
    for item in chunk.items:
        _run_item(report, item, chunk.failures_dir)
    return len(chunk.items), report


def run_campaign(
    *,
    seed: int = 0,
    schedules: int = DEFAULT_SCHEDULES,
    mutants: bool = True,
    failures_dir: Path | None = None,
    advance: Callable[[int], None] = lambda n: None,
    workers: int = 1,
    shard: tuple[int, int] = (0, 1),
) -> CampaignReport:
    """Run the campaign (or its shard ``shard = (I, N)``) in ``workers``
    processes; ``advance(n)`` is told of each finished step."""
    index, count = shard
    if not 0 <= index < count:
        raise ValueError(f"shard {index}/{count}: need 0 <= I < N")
    if workers < 1:
        raise ValueError("workers must be at least 1")
    started = time.perf_counter()
    _SHOWN.clear()
    items = _shard_items(_items(schedules, mutants), shard)
    report = CampaignReport(
        seed=seed,
        schedules=schedules,
        shard=shard,
        workers=workers,
        with_mutants=mutants,
        mutants_expected=sum(1 for kind, _ in items if kind == "mutant"),
    )
    chunks = [
        _Chunk(seed, schedules, tuple(items[n : n + _CHUNK]), failures_dir)
        for n in range(0, len(items), _CHUNK)
    ]
    if workers == 1 or len(chunks) < 2:
        results: Iterable[tuple[int, CampaignReport]] = map(_run_chunk, chunks)
        _collect(report, results, advance)
    else:
        _single_runs()  # once, before the workers fork
        record_fault_runs()
        context = multiprocessing.get_context(
            "fork" if "fork" in multiprocessing.get_all_start_methods() else "spawn"
        )
        with context.Pool(min(workers, len(chunks))) as pool:
            _collect(report, pool.imap_unordered(_run_chunk, chunks), advance)
    report.mutants.sort(key=lambda m: [mutant.name for mutant in MUTANTS].index(m.name))
    report.elapsed = time.perf_counter() - started
    return report


def _collect(
    report: CampaignReport,
    results: Iterable[tuple[int, CampaignReport]],
    advance: Callable[[int], None],
) -> None:
    for done, part in results:
        report.absorb(part)
        advance(done)
