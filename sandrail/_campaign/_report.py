"""The campaign's report: counts per contract line and fault kind, the
retries after struck calls, mutants, failures; as JSON and back, and merged
from the shards of one campaign.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import attrs

from sandrail.interpreters.simulator import FAULT_TABLE, FaultKind
from sandrail.testing._faults import TRANSIENT_KINDS
from sandrail.testing._judge import CONTRACT_LINES, Violation
from sandrail.testing._record_faults import RECORD_FAULT_KINDS as RECORD_KINDS

from ._tallies import DECISIVE_GOAL, STATUSES, Tallies

__all__ = [
    "DECISIVE_GOAL",
    "STATUSES",
    "UNREACHABLE",
    "CampaignReport",
    "Failure",
    "MergeError",
    "MutantResult",
    "merge_reports",
]

UNREACHABLE: dict[tuple[str, str], str] = {
    (kind.value, status): row.unreachable
    for kind, row in FAULT_TABLE.items()
    for status in STATUSES
    if status not in row.reaches
} | {
    (kind, "ok"): "a struck record read or write fails the call: never ok" for kind in RECORD_KINDS
}
"""Coverage cells (fault kind, status of the struck call) no plan can reach,
and why (the fault table's ``reaches`` and ``unreachable``)."""

_TRANSIENT = tuple(kind.value for kind in TRANSIENT_KINDS) + RECORD_KINDS
"""Kinds after which a retry must be decisive: the record's are transient too."""

UNCERTAIN_RETRY_CLASSES: Mapping[str, str] = {
    kind.value: row.retry_may_stay_uncertain
    for kind, row in FAULT_TABLE.items()
    if row.retry_may_stay_uncertain is not None
}
"""Why a retry after an evidence-destroying fault may stay uncertain."""


class MergeError(ValueError):
    """The reports given to ``--merge`` are not the shards of one campaign."""


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


def _counters(data: Mapping[str, Mapping[str, int]]) -> dict[str, Counter[str]]:
    return {key: Counter({k: int(v) for k, v in value.items()}) for key, value in data.items()}


@attrs.define
class CampaignReport(Tallies):
    """What the simulator's campaign found: its :class:`Tallies` (keyed by
    fault kind), plans, mutants and failures (see ``run_campaign``)."""

    seed: int
    schedules: int
    shard: tuple[int, int] = (0, 1)
    """This report's part of the campaign: (index, count) of ``--shard I/N``."""
    workers: int = 1
    single_fault_plans: int = 0
    plans: int = 0
    mutants: list[MutantResult] = attrs.Factory(list)
    failures: list[Failure] = attrs.Factory(list)
    elapsed: float = 0.0
    with_mutants: bool = True
    """Whether mutants were run (``--no-mutants``: false, and the run cannot pass)."""
    mutants_expected: int = 0
    """Mutants this report's part of the campaign runs."""

    # -- verdicts ----------------------------------------------------------------------

    def decisive(self, kinds: Iterable[FaultKind] = TRANSIENT_KINDS) -> tuple[int, int]:
        """(decisive retries, all retries) after faults of ``kinds``."""
        return self.count_decisive(kind.value for kind in kinds)

    @property
    def decisive_share(self) -> float:
        return self.decisive_share_of(_TRANSIENT)

    @property
    def passed(self) -> bool:
        """No violation, retries after transient faults decisive enough, and
        mutants ran and every one was caught (a run without mutants cannot
        pass: it has not shown the checks can fail)."""
        caught = all(m.caught for m in self.mutants)
        complete = len(self.mutants) == self.mutants_expected
        return (
            not sum(self.violations.values())
            and self.decisive_share >= DECISIVE_GOAL
            and self.with_mutants
            and caught
            and complete
        )

    # -- JSON --------------------------------------------------------------------------

    def to_json(self) -> dict[str, Any]:
        return {
            "passed": self.passed,
            "seed": self.seed,
            "schedules": self.schedules,
            "shard": list(self.shard),
            "workers": self.workers,
            "single_fault_plans": self.single_fault_plans,
            "plans": self.plans,
            "calls": self.calls,
            "violations": {line: self.violations.get(line, 0) for line in CONTRACT_LINES},
            **self.tallies_json(
                (*(kind.value for kind in FaultKind), *RECORD_KINDS),
                _TRANSIENT,
                unreachable=UNREACHABLE,
            ),
            "mutants": {
                "caught": sum(m.caught for m in self.mutants),
                "total": len(self.mutants),
                "expected": self.mutants_expected,
                "run": self.with_mutants,
                "results": [attrs.asdict(m) for m in self.mutants],
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

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> CampaignReport:
        """The report :meth:`to_json` wrote (``ValueError``/``KeyError`` if
        ``data`` is not one)."""
        shard = data.get("shard", [0, 1])
        report = cls(
            seed=int(data["seed"]),
            schedules=int(data["schedules"]),
            shard=(int(shard[0]), int(shard[1])),
            workers=int(data.get("workers", 1)),
            single_fault_plans=int(data["single_fault_plans"]),
            plans=int(data["plans"]),
            calls=int(data["calls"]),
            violations=Counter({k: int(v) for k, v in data["violations"].items() if v}),
            coverage={
                kind: Counter({s: v for s, v in cells.items() if isinstance(v, int)})
                for kind, cells in data["coverage"].items()
            },
            reconciled=_counters(data["reconciled"]),
            retry_steps=_counters(data.get("retry_steps", {})),
            retry_reasons=_counters(data.get("uncertain_retries", {})),
            elapsed=float(data.get("elapsed_seconds", 0.0)),
            with_mutants=bool(data["mutants"].get("run", True)),
            mutants_expected=int(data["mutants"].get("expected", data["mutants"]["total"])),
        )
        report.mutants = [MutantResult(**m) for m in data["mutants"]["results"]]
        report.failures = [
            Failure(
                Violation(f["line"], f["call"], f["message"]),
                f["plan"],
                tuple(Path(p) for p in f["recordings"]),
            )
            for f in data["failures"]
        ]
        return report

    # -- combining ---------------------------------------------------------------------

    def absorb(self, other: CampaignReport) -> None:
        """Add ``other``'s counts, mutants and failures to this report (one
        failure per contract line is kept: the first)."""
        self.single_fault_plans += other.single_fault_plans
        self.plans += other.plans
        self.absorb_tallies(other)
        self.mutants.extend(other.mutants)
        shown = {failure.violation.line for failure in self.failures}
        for failure in other.failures:
            if failure.violation.line not in shown:
                self.failures.append(failure)
                shown.add(failure.violation.line)


def merge_reports(reports: Sequence[CampaignReport]) -> CampaignReport:
    """One report from the shards of one campaign (``sandrail simulate
    --merge``). Raises :class:`MergeError` unless ``reports`` are exactly
    the shards 0..N-1 of one seed, schedule count and N."""
    if not reports:
        raise MergeError("no reports to merge")
    first = reports[0]
    count = first.shard[1]
    for report in reports:
        if (report.seed, report.schedules, report.shard[1]) != (first.seed, first.schedules, count):
            raise MergeError(
                "the reports come from different campaigns: seed, --schedules and the N of "
                "--shard I/N must agree"
            )
    indexes = sorted(report.shard[0] for report in reports)
    if indexes != list(range(count)):
        raise MergeError(f"need each shard 0..{count - 1} exactly once, got {indexes}")
    merged = CampaignReport(
        seed=first.seed,
        schedules=first.schedules,
        shard=(0, 1),
        workers=sum(report.workers for report in reports),
        with_mutants=all(report.with_mutants for report in reports),
        mutants_expected=sum(report.mutants_expected for report in reports),
    )
    for report in sorted(reports, key=lambda r: r.shard[0]):
        merged.absorb(report)
        merged.elapsed = max(merged.elapsed, report.elapsed)
    merged.mutants.sort(key=lambda m: m.name)
    return merged
