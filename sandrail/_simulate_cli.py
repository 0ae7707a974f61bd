"""``sandrail simulate``: the fault campaign on the embedded simulator.

Runs every single-fault plan over a workload of each tool and owner mode,
seeded random multi-fault schedules, and the mutants of the core; judges
every call against the simulator's ground truth; prints the report.

Exit status: 0 when no contract line was violated and every mutant was
caught; 1 otherwise. A violation prints its minimal failing plan and the
cassettes that ``sandrail replay`` re-runs.
"""

from __future__ import annotations

import json
import sys
from collections import Counter
from pathlib import Path

import click
from rich import box
from rich.console import Console, Group
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from sandrail._campaign import (
    CONTRACT_LINES,
    DEFAULT_SCHEDULES,
    STATUSES,
    UNREACHABLE,
    CampaignReport,
    run_campaign,
    total_steps,
)
from sandrail.interpreters.simulator import FaultKind

__all__ = ["simulate"]

_LINES = {
    "C2": "at most one launch per task id",
    "C3": "same key, other arguments: conflict, nothing launched",
    "C4": "read/stop only this session's commands",
    "C5": "error: executed false, nothing ran, even late",
    "C6": "uncertain: full locator, never executed false",
    "C7": "ok launch: exactly one launch",
    "C9": "authority/drift: before dispatch error, after uncertain",
    "C10": "a stale fence never runs",
    "C11": "abort: before dispatch canceled, after uncertain",
    "C12": "every result within the byte budget",
    "C13": "identity fields byte-identical",
    "C14": "oversized identity refused before any effect",
    "C17": "env values never in results or recordings",
}


def render(report: CampaignReport) -> Group:
    """The report as rich tables."""
    summary = Table(title=f"sandrail simulate — seed {report.seed}", show_header=False)
    summary.add_column(style="bold")
    summary.add_column(justify="right")
    summary.add_row(
        "plans explored",
        f"{report.plans} ({report.single_fault_plans} single-fault, {report.schedules} schedules)",
    )
    summary.add_row("calls judged", str(report.calls))
    summary.add_row("violations", str(sum(report.violations.values())))
    caught = sum(m.caught for m in report.mutants)
    summary.add_row("mutants caught", f"{caught}/{len(report.mutants)}")
    summary.add_row("elapsed", f"{report.elapsed:.1f} s")
    summary.add_row("seed", str(report.seed))

    lines = Table(title="violations per contract line")
    lines.add_column("line")
    lines.add_column("contract")
    lines.add_column("violations", justify="right")
    for line in CONTRACT_LINES:
        count = report.violations.get(line, 0)
        lines.add_row(line, _LINES[line], f"[red]{count}[/]" if count else "0")

    coverage = Table(
        title="coverage: fault kind × status of the struck call, then of its retry",
        box=box.SIMPLE_HEAD,
    )
    coverage.add_column("fault kind", no_wrap=True)
    for status in STATUSES:
        coverage.add_column(status, justify="right")
    for status in STATUSES:
        coverage.add_column(f"↻ {status}", justify="right")
    notes: dict[str, str] = {}
    for kind in FaultKind:
        cells = []
        for status in STATUSES:
            count = report.coverage.get(kind.value, Counter()).get(status, 0)
            reason = UNREACHABLE.get((kind.value, status))
            if not count and reason is not None:
                mark = notes.setdefault(reason, "*" * (len(notes) + 1))
                cells.append(f"— {mark}")
            else:
                cells.append(str(count) if count else "[yellow]0[/]")
        for status in STATUSES:
            cells.append(str(report.reconciled.get(kind.value, Counter()).get(status, 0)))
        coverage.add_row(kind.value, *cells)
    coverage.caption = "  ".join(f"{mark} unreachable: {reason}" for reason, mark in notes.items())

    mutants = Table(title="mutants (deliberately broken cores)")
    mutants.add_column("mutant", no_wrap=True)
    mutants.add_column("expected")
    mutants.add_column("caught by")
    mutants.add_column("plans", justify="right")
    for mutant in report.mutants:
        verdict = mutant.caught_by or "[red]SURVIVED[/]"
        mutants.add_row(mutant.name, mutant.expected, verdict, str(mutant.plans))

    verdict = (
        "[green bold]PASS[/]: no contract line violated, every mutant caught"
        if report.passed
        else "[red bold]FAIL[/]: see the violations and mutants above"
    )
    return Group(summary, lines, coverage, mutants, verdict)


def _print_failures(report: CampaignReport) -> None:
    # Plain echo, not rich: plans and paths must stay unwrapped to be pasted.
    for failure in report.failures:
        violation = failure.violation
        click.echo(f"\n{violation.line} violated at call {violation.call}: {violation.message}")
        click.echo(f"minimal failing plan: {failure.plan}")
        for path in failure.recordings:
            click.echo(f"  replay: sandrail replay {path}")


@click.command("simulate")
@click.option(
    "--schedules",
    type=click.IntRange(min=0),
    default=DEFAULT_SCHEDULES,
    show_default=True,
    help="How many seeded random multi-fault schedules to run.",
)
@click.option("--seed", type=int, default=0, show_default=True, help="Seed of the schedules.")
@click.option("--json", "as_json", is_flag=True, help="Print the report as one JSON object.")
@click.option(
    "--failures-dir",
    type=click.Path(file_okay=False, path_type=Path),
    help="Where recordings of failing plans go (default: a new temporary directory).",
)
@click.option("--no-mutants", is_flag=True, help="Skip the mutants (the run cannot pass).")
def simulate(
    schedules: int, seed: int, as_json: bool, failures_dir: Path | None, no_mutants: bool
) -> None:
    """Run the fault campaign on the embedded simulator and judge every call.

    Exit status: 0 no violations and every mutant caught, 1 otherwise.
    """
    if as_json:
        report = run_campaign(
            seed=seed, schedules=schedules, mutants=not no_mutants, failures_dir=failures_dir
        )
        click.echo(json.dumps(report.to_json(), ensure_ascii=False))
    else:
        console = Console()
        with Progress(
            TextColumn("[bold]campaign"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            console=console,
            transient=True,
        ) as progress:
            task = progress.add_task("plans", total=total_steps(schedules))
            report = run_campaign(
                seed=seed,
                schedules=schedules,
                mutants=not no_mutants,
                failures_dir=failures_dir,
                advance=lambda n: progress.advance(task, n),
            )
        console.print(render(report))
        _print_failures(report)
    sys.exit(0 if report.passed else 1)
