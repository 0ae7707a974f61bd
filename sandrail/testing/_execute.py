"""Running one plan of the fault campaign (and of the conformance kit): a
workload or a schedule in a fresh world, then the judge.

Strategy: a harness that gets ``uncertain`` retries the call with the same
operation key (the locator is there for that, ``docs/explanation/uncertain.md``). So when a fault
strikes a call of a single-fault plan and the call comes back
``uncertain``, the harness here retries it at once, labelled ``reconcile``;
the status of that retry is what decisiveness measures (a retry after a
transient fault must say ``ok`` or ``error``). Workload steps labelled
``retry`` are part of the workloads themselves (C2 after a clean launch).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import attrs

import sandrail
from sandrail.interpreters.simulator import FaultKind, FaultPlan

from ._calls import SESSION, CallRecord, Mode
from ._commands import SCRIPTS, SECRET
from ._judge import Violation, judge
from ._plans import Schedule, Step, Workload
from ._truth import Target, TargetFactory
from ._world import World

__all__ = [
    "BUDGET",
    "FOREIGN_SESSION",
    "PlanOutcome",
    "Retry",
    "execute_steps",
    "run_and_judge",
    "run_schedule",
    "run_workload",
]

BUDGET = 1_500
"""Small enough that chatty output must be cut on every return path (C12)."""
FOREIGN_SESSION = "session-2"


@attrs.frozen
class Retry:
    """The reconciling retry after a struck call came back uncertain."""

    kind: str
    """The fault kind that struck."""
    step: str
    """``workload name · step label`` of the struck call."""
    status: str
    """The retry's status."""
    error_type: str | None


@attrs.frozen
class PlanOutcome:
    """What one plan did: its world (for inspection), violations and retries."""

    world: World
    violations: tuple[Violation, ...]
    retries: tuple[Retry, ...] = ()


class _Ports:
    """The ports of one run: created on first use, dropped on a restart.

    Every port keeps its ownership records durably (shared by the session's
    ports and kept across restarts), as the README recommends."""

    def __init__(self, world: World, mode: Mode) -> None:
        self.world = world
        self.mode = mode
        self._ports: dict[str, sandrail.ToolPort] = {}

    def get(self, name: str) -> sandrail.ToolPort:
        if name not in self._ports:
            session = FOREIGN_SESSION if name == "foreign" else SESSION
            self._ports[name] = self.world.port(
                "code" if name == "code" else "command",
                session_id=session,
                owner=self.mode,
                durable_ownership=True,
                max_output_bytes=BUDGET,
            )
        return self._ports[name]

    def restart(self) -> None:
        """The harness restarts: new ports with empty in-memory ledgers (the
        durable ownership records stay, as a database would)."""
        self._ports.clear()


def _arguments(world: World, step: Step, port: sandrail.ToolPort) -> dict[str, Any]:
    arguments = dict(step.arguments)
    if step.task_of is not None:
        task = sandrail.task_id(SESSION, port.settings.owner, step.task_of)
        arguments["task_id"] = task
        if step.follow:
            cursors = _last_cursors(world, task)
            if cursors is not None:
                arguments["stdout_cursor"], arguments["stderr_cursor"] = cursors
    return arguments


def _last_cursors(world: World, task: str) -> tuple[int, int] | None:
    """The cursors the last ``ok`` read of ``task`` returned."""
    for record in reversed(world.calls):
        result = record.result
        if record.tool != "read_command_output" or record.task != task or result is None:
            continue
        if result.status == "ok":
            return result.content["stdout_cursor"], result.content["stderr_cursor"]
    return None


def _reconcile(
    world: World,
    port: sandrail.ToolPort,
    step: Step,
    struck: CallRecord,
    workload: str,
    *,
    wiped: bool,
) -> Retry:
    """Retry the call ``struck`` records with the same key, as the harness
    first made it (a fault may have changed the request object in place).
    After the workload's own ledger wipe the retry counts as one after a
    wiped ledger, whatever fault struck: the wipe destroyed the evidence."""
    again = world.request(
        port, step.tool, _arguments(world, step, port), key=step.key, fence=step.fence
    )
    with world.labelled("reconcile"):
        retried = port.execute_sync(again)
    struck_kind = struck.faults[0].kind.value if struck.faults else struck.record_faults[0][1]
    return Retry(
        kind=FaultKind.LEDGER_WIPED.value if wiped else struck_kind,
        step=f"{workload} · {step.label}",
        status=retried.status,
        error_type=retried.content.get("error_type"),
    )


def execute_steps(
    world: World, mode: Mode, steps: Sequence[Step], *, workload: str = "", reconcile: bool = False
) -> list[Retry]:
    ports = _Ports(world, mode)
    retries: list[Retry] = []
    struck = wiped = False
    for step in steps:
        if step.action == "deliver":
            world.deliver_held()
        elif step.action == "restart":
            ports.restart()
        elif step.action == "advance":
            world.advance(step.seconds)
        elif step.action == "wipe":
            world.wipe_ledger(SESSION)
            wiped = True
        elif step.action == "concurrent":
            duplicates = world.port(
                owner=mode, interleave=True, durable_ownership=True, max_output_bytes=BUDGET
            )
            requests = [
                world.request(
                    duplicates,
                    step.tool,
                    step.arguments,
                    key=step.key,
                    call_id=f"call-{len(world.calls) + n}",
                    fence=step.fence,
                )
                for n in (1, 2)
            ]
            world.call_concurrently(duplicates, requests, label=f"{step.label} (duplicates)")
        else:
            port = ports.get(step.port)
            request = world.request(
                port,
                step.tool,
                _arguments(world, step, port),
                key=step.key,
                call_id=step.call_id,
                fence=step.fence,
            )
            with world.labelled(step.label):
                result = port.execute_sync(request)
            record = world.calls[-1]
            if reconcile and not struck and (record.faults or record.record_faults):
                struck = True
                if result.status == "uncertain":
                    retries.append(_reconcile(world, port, step, record, workload, wiped=wiped))
    return retries


def run_and_judge(world: World, workload: Workload) -> PlanOutcome:
    """Run ``workload`` on ``world`` and judge what the world saw; a call a
    fault left uncertain is retried at once, reconciling. The caller closes
    ``world``, also when this raises."""
    retries = execute_steps(
        world, workload.mode, workload.steps, workload=workload.name, reconcile=True
    )
    # A workload reuses commands under new keys on purpose: no harness's.
    return PlanOutcome(world, tuple(judge(world, harness=False)), tuple(retries))


def _world(
    plan: FaultPlan,
    *,
    target: Target | TargetFactory | None,
    record_dir: Path | None,
    deliver_at: frozenset[int] = frozenset(),
) -> World:
    if target is None:
        return World.simulated(
            plan, scripts=SCRIPTS, deliver_at=deliver_at, record_dir=record_dir, secrets=[SECRET]
        )
    return World.on(target, plan, deliver_at=deliver_at, record_dir=record_dir, secrets=[SECRET])


def run_workload(
    workload: Workload,
    plan: FaultPlan,
    *,
    record_dir: Path | None = None,
    target: Target | TargetFactory | None = None,
) -> PlanOutcome:
    """Run ``workload`` under ``plan`` on the simulator (or on ``target``)
    and judge it; a call a fault left uncertain is retried at once."""
    world = _world(plan, target=target, record_dir=record_dir)
    try:
        return run_and_judge(world, workload)
    finally:
        world.close()


def run_schedule(schedule: Schedule, *, record_dir: Path | None = None) -> PlanOutcome:
    """Run a random schedule on the simulator and judge it."""
    world = _world(
        schedule.plan, target=None, record_dir=record_dir, deliver_at=schedule.deliver_at
    )
    try:
        execute_steps(world, schedule.mode, schedule.steps)
        # Its steps reuse commands under any key on purpose: no harness's.
        violations = judge(world, harness=False)
    finally:
        world.close()
    return PlanOutcome(world, tuple(violations))
