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
from collections.abc import Callable, Iterator
from pathlib import Path

import attrs
import click
from click.core import ParameterSource
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from sandrail._campaign import (
    DEFAULT_SCHEDULES,
    CampaignReport,
    MergeError,
    default_workers,
    merge_reports,
    run_campaign,
    total_steps,
)
from sandrail._campaign._wire import DEFAULT_WIRE_PLANS, run_wire_campaign

from ._simulate_report import render, render_wire

__all__ = ["simulate"]


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
