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

from sandrail.interpreters.simulator import FaultKind
from sandrail.testing._faults import TRANSIENT_KINDS
from sandrail.testing._judge import CONTRACT_LINES, Violation

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

STATUSES = ("ok", "error", "uncertain")
DECISIVE_GOAL = 0.99
"""The share of retries after a transient fault that must say ``ok`` or ``error``."""

UNREACHABLE: dict[tuple[str, str], str] = {
    (kind.value, "ok"): "a struck sandbox effect fails or flips the harness: never ok"
    for kind in FaultKind
}
"""Coverage cells (fault kind, status of the struck call) no plan can reach, and why."""

UNCERTAIN_RETRY_CLASSES: Mapping[str, str] = {
    FaultKind.LEDGER_WIPED.value: (
        "the task's claim, output and state were deleted (by the fault, or by a command "
        "in the workload): the sandbox cannot show the first launch, nor prove it never "
        "happened (claim_lost), so the retry launches nothing and says uncertain"
    ),
    FaultKind.SANDBOX_DIES.value: (
        "the sandbox and everything the command did died with it: the retry cannot reach "
        "it, and what ran before is unknowable (never 'nothing ran' once its key may "
        "have started the task)"
    ),
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
class CampaignReport:
    seed: int
    schedules: int
    shard: tuple[int, int] = (0, 1)
    """This report's part of the campaign: (index, count) of ``--shard I/N``."""
    workers: int = 1
    single_fault_plans: int = 0
    plans: int = 0
    calls: int = 0
    violations: Counter[str] = attrs.Factory(Counter)
    coverage: dict[str, Counter[str]] = attrs.Factory(dict)
    """Fault kind -> status of the call it struck -> count."""
    reconciled: dict[str, Counter[str]] = attrs.Factory(dict)
    """Fault kind -> status of the retry after a struck call came back uncertain."""
    retry_steps: dict[str, Counter[str]] = attrs.Factory(dict)
    """``workload · step`` struck by a transient fault -> retry status -> count."""
    retry_reasons: dict[str, Counter[str]] = attrs.Factory(dict)
    """Fault kind -> error_type of the retries that stayed uncertain -> count."""
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
        counts: Counter[str] = Counter()
        for kind in kinds:
            counts.update(self.reconciled.get(kind.value, Counter()))
        total = sum(counts[status] for status in STATUSES)
        return counts["ok"] + counts["error"], total

    @property
    def decisive_share(self) -> float:
        good, total = self.decisive()
        return 1.0 if total == 0 else good / total

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
        good, total = self.decisive()
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
            "decisive": {
                "transient_kinds": [kind.value for kind in TRANSIENT_KINDS],
                "decisive": good,
                "retries": total,
                "share": round(self.decisive_share, 6),
                "goal": DECISIVE_GOAL,
            },
            "retry_steps": {
                step: {status: counts.get(status, 0) for status in STATUSES}
                for step, counts in sorted(self.retry_steps.items())
            },
            "uncertain_retries": {
                kind: dict(reasons) for kind, reasons in sorted(self.retry_reasons.items())
            },
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
        self.calls += other.calls
        self.violations.update(other.violations)
        for mine, theirs in (
            (self.coverage, other.coverage),
            (self.reconciled, other.reconciled),
            (self.retry_steps, other.retry_steps),
            (self.retry_reasons, other.retry_reasons),
        ):
            for key, counts in theirs.items():
                mine.setdefault(key, Counter()).update(counts)
        self.mutants.extend(other.mutants)
        shown = {failure.violation.line for failure in self.failures}
        for failure in other.failures:
            if failure.violation.line not in shown:
                self.failures.append(failure)
                shown.add(failure.violation.line)


def _cell(coverage: dict[str, Counter[str]], kind: str, status: str) -> int | str:
    count = coverage.get(kind, Counter()).get(status, 0)
    if not count and (kind, status) in UNREACHABLE:
        return "unreachable: " + UNREACHABLE[(kind, status)]
    return count


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
