"""``sandrail simulate``: the fault campaign on the embedded simulator, or
on the wire against a local E2B (``--backend local-e2b``).

Runs every single-fault plan over a workload of each tool and owner mode,
seeded random multi-fault schedules, and the mutants of the core; judges
every call against the simulator's ground truth; prints the report. Runs in
``--workers`` processes; ``--shard I/N`` runs one N-th of the campaign (for a
CI matrix), and ``--merge`` adds up the ``--json`` reports of the shards.

``--backend local-e2b`` runs ``--plans`` single-fault wire plans instead:
the same workloads on the E2B interpreter through the unmodified SDK against
a local-e2b server per worker, a wire fault struck on one effect's request,
every call judged against the server's ground truth
(:mod:`sandrail._campaign._wire`).

Exit status: 0 when no contract line was violated, retries after transient
faults were decisive, and (simulator) every mutant was caught; 1 otherwise;
2 for a usage error (``--merge`` of reports that are not one campaign's
shards, an option the chosen backend does not take).
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
from collections import Counter
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path

import attrs
import click
from click.core import ParameterSource
from rich import box
from rich.console import Console, Group
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from sandrail._campaign import (
    DECISIVE_GOAL,
    DEFAULT_SCHEDULES,
    STATUSES,
    UNCERTAIN_RETRY_CLASSES,
    UNREACHABLE,
    CampaignReport,
    MergeError,
    default_workers,
    merge_reports,
    run_campaign,
    total_steps,
)
from sandrail._campaign._records import RECORD_KINDS
from sandrail._campaign._wire import (
    DEFAULT_WIRE_PLANS,
    NO_WIRE_EQUIVALENT,
    TRANSIENT_WIRE_KINDS,
    WIRE_KINDS,
    WireKind,
    WireReport,
    run_wire_campaign,
)
from sandrail.interpreters.simulator import FaultKind
from sandrail.testing import CONTRACT_LINES, TRANSIENT_KINDS
from sandrail.testing._judge import LINE_SUMMARIES

__all__ = ["simulate"]


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


@attrs.frozen
class _Bar:
    """A campaign's progress callbacks: ``planned(n)`` steps in all,
    ``advance(n)`` steps finished (both do nothing without a bar)."""

    planned: Callable[[int], None] = lambda n: None
    advance: Callable[[int], None] = lambda n: None


@contextlib.contextmanager
def _progress(label: str, *, quiet: bool, total: int | None = None) -> Iterator[_Bar]:
    """A transient progress bar labelled ``label`` on stderr while the block
    runs, of ``total`` steps (``None``: until ``planned`` says); none when
    ``quiet`` (``--json``) or stderr is not a terminal."""
    if quiet or not sys.stderr.isatty():
        yield _Bar()
        return
    with Progress(
        TextColumn(f"[bold]{label}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=Console(stderr=True),
        transient=True,
    ) as progress:
        task = progress.add_task("plans", total=total)
        yield _Bar(
            planned=lambda n: progress.update(task, total=n),
            advance=lambda n: progress.advance(task, n),
        )


def _print_failures(report: CampaignReport) -> None:
    # Plain echo, not rich: plans and paths must stay unwrapped to be pasted.
    for failure in report.failures:
        violation = failure.violation
        click.echo(f"\n{violation.line} violated at call {violation.call}: {violation.message}")
        click.echo(f"minimal failing plan: {failure.plan}")
        for path in failure.recordings:
            click.echo(f"  replay: sandrail replay {path}")


def _shard(
    context: click.Context, parameter: click.Parameter, value: str | None
) -> tuple[int, int]:
    if value is None:
        return (0, 1)
    index, _, count = value.partition("/")
    try:
        shard = (int(index), int(count))
    except ValueError:
        raise click.BadParameter("use I/N, e.g. 0/4 for the first of four shards") from None
    if not (shard[1] >= 1 and 0 <= shard[0] < shard[1]):
        raise click.BadParameter("I/N needs 0 <= I < N")
    return shard


def _load(path: Path) -> CampaignReport:
    try:
        return CampaignReport.from_json(json.loads(path.read_text(encoding="utf-8")))
    except (OSError, ValueError, KeyError, TypeError, IndexError) as exc:
        raise click.UsageError(
            f"{path} is not a `sandrail simulate --json` report: {exc}"
        ) from None


def _wire(plans: int, seed: int, workers: int, as_json: bool, console: Console) -> None:
    """Run the wire campaign, print its report and exit."""
    # The SDK retries a refused connection with backoff, seconds each: the
    # same failure in the end (connect failed: not sent). Plans that refuse
    # or kill the server would spend most of their time there.
    os.environ.setdefault("E2B_CONNECTION_RETRIES", "0")
    with _progress("wire campaign", quiet=as_json) as bar:
        report = run_wire_campaign(
            plans=plans or None,
            seed=seed,
            workers=workers,
            advance=bar.advance,
            planned=bar.planned,
        )
    if as_json:
        click.echo(json.dumps(report.to_json(), ensure_ascii=False))
    else:
        console.print(render_wire(report))
        for violation, plan in report.failures:
            click.echo(f"\n{violation.line} violated at call {violation.call}: {violation.message}")
            click.echo(f"failing plan: {plan}")
        for plan, error_type in report.undecided:
            click.echo(f"\nretry stayed uncertain ({error_type}) after a transient fault: {plan}")
    sys.exit(0 if report.passed else 1)


_SIMULATOR_ONLY = ("schedules", "shard", "merge", "failures_dir", "no_mutants")


@click.command("simulate")
@click.option(
    "--backend",
    type=click.Choice(["simulator", "local-e2b"]),
    default="simulator",
    show_default=True,
    help="Where the campaign runs: the embedded simulator, or the E2B interpreter on the "
    "wire against a local E2B server (one per worker; needs the local-e2b extra).",
)
@click.option(
    "--plans",
    type=click.IntRange(min=0),
    default=DEFAULT_WIRE_PLANS,
    show_default=True,
    help="local-e2b: how many single-fault wire plans to draw (0: every one).",
)
@click.option(
    "--schedules",
    type=click.IntRange(min=0),
    default=DEFAULT_SCHEDULES,
    show_default=True,
    help="How many seeded random multi-fault schedules to run.",
)
@click.option("--seed", type=int, default=0, show_default=True, help="Seed of the schedules.")
@click.option(
    "--workers",
    type=click.IntRange(min=1),
    default=None,
    help="Worker processes (default: the cores this process may use).",
)
@click.option(
    "--shard",
    metavar="I/N",
    callback=_shard,
    help="Run only the I-th of N equal parts (0-based), e.g. one job of a CI matrix.",
)
@click.option(
    "--merge",
    "merge",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    multiple=True,
    help="Add up these --json reports of the shards of one campaign (repeat it); runs nothing.",
)
@click.option("--json", "as_json", is_flag=True, help="Print the report as one JSON object.")
@click.option(
    "--failures-dir",
    type=click.Path(file_okay=False, path_type=Path),
    help="Where recordings of failing plans go (default: a new temporary directory).",
)
@click.option("--no-mutants", is_flag=True, help="Skip the mutants (the run cannot pass).")
def simulate(
    backend: str,
    plans: int,
    schedules: int,
    seed: int,
    workers: int | None,
    shard: tuple[int, int],
    merge: tuple[Path, ...],
    as_json: bool,
    failures_dir: Path | None,
    no_mutants: bool,
) -> None:
    """Run the fault campaign on the embedded simulator (or, with --backend
    local-e2b, on the wire) and judge every call.

    Exit status: 0 no violations, decisive retries and every mutant caught;
    1 otherwise.
    """
    # Wide enough for the tables when the output is not a terminal.
    console = Console() if sys.stdout.isatty() else Console(width=130)
    context = click.get_current_context()

    def given(name: str) -> bool:
        return context.get_parameter_source(name) is not ParameterSource.DEFAULT

    if backend == "local-e2b":
        for name in _SIMULATOR_ONLY:
            if given(name):
                option = "--" + name.replace("_", "-")
                raise click.UsageError(f"{option} is for the simulator's campaign only")
        _wire(plans, seed, workers if workers is not None else default_workers(), as_json, console)
    if given("plans"):
        raise click.UsageError("--plans is for --backend local-e2b only")
    if merge:
        try:
            report = merge_reports([_load(path) for path in merge])
        except MergeError as exc:
            raise click.UsageError(str(exc)) from None
    else:
        total = total_steps(schedules, mutants=not no_mutants, shard=shard)
        with _progress("campaign", quiet=as_json, total=total) as bar:
            report = run_campaign(
                seed=seed,
                schedules=schedules,
                mutants=not no_mutants,
                failures_dir=failures_dir,
                workers=workers if workers is not None else default_workers(),
                shard=shard,
                advance=bar.advance,
            )
    if as_json:
        click.echo(json.dumps(report.to_json(), ensure_ascii=False))
    else:
        console.print(render(report))
        _print_failures(report)
    sys.exit(0 if report.passed else 1)
