"""The fault campaign (``sandrail simulate``) against the port it drives: where
a campaign's time goes, per call judged.

A fixed sample of the default campaign's items (every 5th; every 25th with
``--quick``: mutants, single-fault plans, record faults and schedules alike)
runs in this process, with the time spent inside the port (``execute_sync``,
and concurrent calls with their event loop: the port and core, the world's
tap and the simulator) and inside the simulator measured as it runs (process
CPU time, so other work on a shared machine counts less). The baseline is
the port and core's own time per call (the port less the simulator): the
campaign cannot run faster than that without a faster port (P2). Each row's
ratio is baseline / row: the share of the campaign that is the port and
core. Without ``--quick``, the whole default campaign then runs on two
worker processes, as ``sandrail simulate`` runs it; its ratio is the wall
time two cores would need for the port and core alone over the wall time it
took.
"""

from __future__ import annotations

import resource
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import sandrail._port as port_module
from benchmarks._common import row
from sandrail._campaign import _runner as runner
from sandrail._campaign._report import CampaignReport
from sandrail.interpreters.simulator import Simulator
from sandrail.testing import World

GOAL = (
    "P6: the default campaign (5,104 plans, 45,669 calls judged) ≤ 10 s on two cores; "
    "the port and core per call (P2) bound it from below"
)


@contextmanager
def _timing(spent: dict[str, float]) -> Iterator[None]:
    """Add the CPU time spent in the port and in the simulator to ``spent``
    (outermost calls only: a port inside a port counts once)."""
    inside: dict[str, int] = {"port": 0, "simulator": 0}
    originals: list[tuple[Any, str, Any]] = []

    def timed(owner: Any, name: str, what: str) -> None:
        original = getattr(owner, name)
        originals.append((owner, name, original))

        def sync(*args: Any, **kwargs: Any) -> Any:
            if inside[what]:
                return original(*args, **kwargs)
            inside[what] += 1
            began = time.process_time()
            try:
                return original(*args, **kwargs)
            finally:
                spent[what] += time.process_time() - began
                inside[what] -= 1

        setattr(owner, name, sync)

    timed(port_module.ToolPort, "execute_sync", "port")
    # Concurrent calls interleave on one loop: timed together, loop included.
    timed(World, "call_concurrently", "port")
    timed(Simulator, "__call__", "simulator")
    try:
        yield
    finally:
        for owner, name, original in originals:
            setattr(owner, name, original)


def _sample(step: int) -> tuple[float, dict[str, float], int]:
    """Run every ``step``-th item of the default campaign: CPU seconds in
    all, the port's and the simulator's, and the calls judged."""
    items = runner._items(runner.DEFAULT_SCHEDULES, True)[::step]
    report = CampaignReport(seed=0, schedules=runner.DEFAULT_SCHEDULES)
    spent = {"port": 0.0, "simulator": 0.0}
    runner._SHOWN.clear()
    began = time.process_time()
    with _timing(spent):
        for item in items:
            runner._run_item(report, item, None)
    return time.process_time() - began, spent, report.calls


def _cpu() -> float:
    usage = [resource.getrusage(who) for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN)]
    return sum(u.ru_utime + u.ru_stime for u in usage)


def _whole(workers: int) -> tuple[float, float, int, bool]:
    """The default campaign on ``workers`` processes: wall and CPU seconds,
    calls judged, and whether it passed (every mutant caught)."""
    cpu, began = _cpu(), time.perf_counter()
    report = runner.run_campaign(workers=workers)
    return time.perf_counter() - began, _cpu() - cpu, report.calls, report.passed


def _per_call(seconds: float, calls: int) -> float:
    return 1e6 * seconds / calls


def run(quick: bool) -> list[dict[str, Any]]:
    total, spent, calls = _sample(25 if quick else 5)
    core = spent["port"] - spent["simulator"]
    bench = "campaign sample" if not quick else "campaign sample (quick)"
    floor = _per_call(core, calls)
    per: Callable[[float], float] = lambda seconds: _per_call(seconds, calls)  # noqa: E731
    rows = [
        row(bench, "port + core per call (baseline)", "CPU µs/call", floor, "µs"),
        row(
            bench,
            "the whole campaign per call",
            "CPU µs/call",
            per(total),
            "µs",
            floor / per(total),
        ),
        row(bench, "simulator per call", "CPU µs/call", per(spent["simulator"]), "µs"),
        row(
            bench,
            "the campaign's own per call (world, judge, plans)",
            "CPU µs/call",
            per(total - spent["port"]),
            "µs",
        ),
        row(bench, "calls judged", "calls", calls, "calls"),
    ]
    if not quick:
        wall, cpu, whole_calls, passed = _whole(2)
        ideal = _per_call(core, calls) * whole_calls / 1e6 / 2
        rows += [
            row(
                "default campaign, 2 workers",
                "wall" + ("" if passed else " (FAILED)"),
                "s",
                wall,
                "s",
                ideal / wall,
            ),
            row("default campaign, 2 workers", "CPU, all processes", "s", cpu, "s"),
            row("default campaign, 2 workers", "port + core alone on 2 cores", "s", ideal, "s"),
        ]
    return rows
