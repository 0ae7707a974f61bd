"""The reports of ``sandrail simulate`` as rich tables: the simulator's
campaign (:func:`render`) and the wire campaign (:func:`render_wire`), and
the tables both show."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping

from rich import box
from rich.console import Group
from rich.table import Table

from sandrail._campaign import (
    DECISIVE_GOAL,
    STATUSES,
    UNCERTAIN_RETRY_CLASSES,
    UNREACHABLE,
    CampaignReport,
)
from sandrail._campaign._records import RECORD_KINDS
from sandrail._campaign._wire import (
    NO_WIRE_EQUIVALENT,
    TRANSIENT_WIRE_KINDS,
    WIRE_KINDS,
    WireKind,
    WireReport,
)
from sandrail.interpreters.simulator import FaultKind
from sandrail.testing import CONTRACT_LINES, TRANSIENT_KINDS
from sandrail.testing._judge import LINE_SUMMARIES

__all__ = ["render", "render_wire"]


def render(report: CampaignReport) -> Group:
    """The report as rich tables."""
    title = f"sandrail simulate — seed {report.seed}"
    if report.shard[1] > 1:
        title += f", shard {report.shard[0]}/{report.shard[1]}"
    summary = _summary(title)
    summary.add_row(
        "plans explored",
        f"{report.plans} ({report.single_fault_plans} single-fault, "
        f"{report.plans - report.single_fault_plans} schedules)",
    )
    summary.add_row("calls judged", str(report.calls))
    summary.add_row("violations", str(sum(report.violations.values())))
    _add_decisive_row(
        summary, "decisive retries (transient faults)", report.decisive(), report.decisive_share
    )
    caught = sum(m.caught for m in report.mutants)
    summary.add_row("mutants caught", f"{caught}/{report.mutants_expected}")
    summary.add_row("elapsed", f"{report.elapsed:.1f} s on {report.workers} worker(s)")

    coverage = Table(
        title="coverage: fault kind × status of the struck call, then of its retry (↻)",
        box=box.SIMPLE_HEAD,
    )
    coverage.add_column("fault kind", no_wrap=True)
    _add_status_columns(coverage)
    notes: dict[str, str] = {}
    transient = {kind.value for kind in TRANSIENT_KINDS} | set(RECORD_KINDS)
    for kind in (*(kind.value for kind in FaultKind), *RECORD_KINDS):
        cells = []
        for status in STATUSES:
            count = report.coverage.get(kind, Counter()).get(status, 0)
            reason = UNREACHABLE.get((kind, status))
            if not count and reason is not None:
                mark = notes.setdefault(reason, "*" * (len(notes) + 1))
                cells.append(f"— {mark}")
            else:
                cells.append(str(count) if count else "[yellow]0[/]")
        retried = report.reconciled.get(kind, Counter())
        cells += _retry_cells(retried, transient=kind in transient)
        coverage.add_row(kind, *cells)
    coverage.caption = "  ".join(f"{mark} unreachable: {reason}" for reason, mark in notes.items())
    coverage.caption += (
        "\n↻: the retry with the same operation key after a struck call came back uncertain."
        " (…): evidence-destroying kinds, not held to the goal."
    )

    mutants = Table(title="mutants (deliberately broken cores)")
    mutants.add_column("mutant", no_wrap=True)
    mutants.add_column("expected")
    mutants.add_column("caught by")
    mutants.add_column("plans", justify="right")
    for mutant in report.mutants:
        verdict = mutant.caught_by or "[red]SURVIVED[/]"
        mutants.add_row(mutant.name, mutant.expected, verdict, str(mutant.plans))

    if report.passed:
        verdict = (
            "[green bold]PASS[/]: no contract line violated, retries decisive, every mutant caught"
        )
    else:
        verdict = "[red bold]FAIL[/]: see the violations, retries and mutants above"
    parts = [
        summary,
        _violations_table(report.violations),
        coverage,
        _steps_table(
            report.retry_steps, "retries after a transient fault, by the workload step it struck"
        ),
    ]
    if report.retry_reasons:
        parts.append(
            _uncertain_table(
                "fault kind",
                report.retry_reasons,
                lambda struck: UNCERTAIN_RETRY_CLASSES.get(struck, _NO_ANSWER),
            )
        )
    return Group(*parts, mutants, verdict)


def render_wire(report: WireReport) -> Group:
    """The wire campaign's report as rich tables."""
    summary = _summary(f"sandrail simulate --backend local-e2b — seed {report.seed}")
    summary.add_row(
        "wire plans struck",
        f"{report.plans} of {report.planned} drawn ({report.not_struck} never struck)",
    )
    summary.add_row("fault-free runs (to learn what can be struck)", str(report.fault_free))
    summary.add_row("calls judged", str(report.calls))
    summary.add_row("violations", str(sum(report.violations.values())))
    _add_decisive_row(
        summary,
        "decisive retries (transient wire faults)",
        report.decisive(),
        report.decisive_share,
    )
    summary.add_row("elapsed", f"{report.elapsed:.1f} s on {report.workers} worker(s)")

    kinds = Table(
        title="wire kinds: what each stands for, the struck call's status, then its retry's (↻)",
        box=box.SIMPLE_HEAD,
    )
    kinds.add_column("wire kind", no_wrap=True)
    kinds.add_column("stands for", no_wrap=True)
    _add_status_columns(kinds)
    for kind, mapping in WIRE_KINDS.items():
        struck = report.coverage.get(kind.value, Counter())
        kinds.add_row(
            kind.value,
            mapping.stands_for.value,
            *(str(struck.get(status, 0)) for status in STATUSES),
            *_retry_cells(report.reconciled.get(kind.value, Counter()), mapping.transient),
        )
    kinds.caption = "  ".join(f"{kind.value}: {m.how}." for kind, m in WIRE_KINDS.items())
    kinds.caption += "\n(…): evidence-destroying kinds, not held to the goal."

    missing = Table(title="campaign kinds with no wire equivalent", box=box.SIMPLE)
    missing.add_column("kind", no_wrap=True)
    missing.add_column("why")
    for fault_kind, why in NO_WIRE_EQUIVALENT.items():
        missing.add_row(fault_kind.value, why)

    transient = {kind.value for kind in TRANSIENT_WIRE_KINDS}

    def uncertain_why(struck: str) -> str:
        stands = WIRE_KINDS[WireKind(struck)].stands_for.value
        return _NO_ANSWER if struck in transient else UNCERTAIN_RETRY_CLASSES.get(stands, "")

    if report.passed:
        verdict = "[green bold]PASS[/]: no contract line violated, retries decisive"
    else:
        verdict = "[red bold]FAIL[/]: see the violations and retries above"
    parts = [
        summary,
        _violations_table(report.violations),
        kinds,
        missing,
        _steps_table(
            report.retry_steps,
            "retries after a transient wire fault, by the workload step it struck",
        ),
    ]
    if report.retry_reasons:
        parts.append(_uncertain_table("wire kind", report.retry_reasons, uncertain_why))
    return Group(*parts, verdict)


# ---------------------------------------------------------------------------
# Tables both reports show

_NO_ANSWER = "[red]a transient fault left no answer[/]"
"""Why a retry after a transient fault stayed uncertain: no reason, a finding."""


def _summary(title: str) -> Table:
    """A two-column table of labelled numbers (rows are added by the caller)."""
    summary = Table(title=title, show_header=False)
    summary.add_column(style="bold")
    summary.add_column(justify="right")
    return summary


def _add_decisive_row(summary: Table, label: str, decisive: tuple[int, int], share: float) -> None:
    """The row of decisive retries (good, total) and their share, red below the goal."""
    good, total = decisive
    mark = "" if share >= DECISIVE_GOAL else "[red]"
    summary.add_row(
        label, f"{mark}{good}/{total} = {100 * share:.1f}%  (goal ≥ {100 * DECISIVE_GOAL:.0f}%)"
    )


def _violations_table(violations: Mapping[str, int]) -> Table:
    """Violations per contract line, every line shown (a non-zero count red)."""
    lines = Table(title="violations per contract line")
    lines.add_column("line")
    lines.add_column("contract")
    lines.add_column("violations", justify="right")
    for line in CONTRACT_LINES:
        count = violations.get(line, 0)
        lines.add_row(line, LINE_SUMMARIES[line], f"[red]{count}[/]" if count else "0")
    return lines


def _add_status_columns(table: Table) -> None:
    """A column per status of the struck call, one per status of its retry
    (↻), and the retry's decisive share: the cells of a kind's row after its
    name (the struck call's, then :func:`_retry_cells`)."""
    for status in STATUSES:
        table.add_column(status, justify="right")
    for status in STATUSES:
        table.add_column(f"↻ {status}", justify="right")
    table.add_column("↻ decisive", justify="right")


def _retry_cells(retried: Mapping[str, int], transient: bool) -> list[str]:
    """The retries of one kind per status, then the decisive share (``—``
    when none was retried; in parentheses unless ``transient``: an
    evidence-destroying kind is not held to the goal)."""
    tried = sum(retried.get(status, 0) for status in STATUSES)
    decided = retried.get("ok", 0) + retried.get("error", 0)
    rate = f"{100 * decided / tried:.1f}%" if tried else "—"
    return [
        *(str(retried.get(status, 0)) for status in STATUSES),
        rate if transient else f"({rate})",
    ]


def _steps_table(retry_steps: Mapping[str, Mapping[str, int]], title: str) -> Table:
    """Retry statuses per workload step struck (uncertain retries red)."""
    steps = Table(title=title, box=box.SIMPLE)
    steps.add_column("workload · step", no_wrap=True)
    for status in STATUSES:
        steps.add_column(f"↻ {status}", justify="right")
    for step, counts in sorted(retry_steps.items()):
        cells = [str(counts.get(status, 0)) for status in STATUSES]
        if counts.get("uncertain"):
            cells[-1] = f"[red]{cells[-1]}[/]"
        steps.add_row(step, *cells)
    return steps


def _uncertain_table(
    kind_column: str,
    retry_reasons: Mapping[str, Mapping[str, int]],
    why: Callable[[str], str],
) -> Table:
    """The retries that stayed uncertain per kind and error_type, and
    ``why(kind)`` they may (kinds and error types sorted)."""
    remaining = Table(title="retries that stayed uncertain, and why", box=box.SIMPLE)
    remaining.add_column(kind_column, no_wrap=True)
    remaining.add_column("count", justify="right")
    remaining.add_column("error_type")
    remaining.add_column("why")
    for struck, reasons in sorted(retry_reasons.items()):
        for reason, count in sorted(reasons.items()):
            remaining.add_row(struck, str(count), reason, why(struck))
    return remaining
