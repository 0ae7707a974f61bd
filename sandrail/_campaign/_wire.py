"""The wire campaign: single faults struck on the wire between the unmodified
e2b SDK and a local-e2b server, under the E2B interpreter, judged by the
server's ground truth (``sandrail simulate --backend local-e2b``).

Strategy: the campaign's workloads (every tool, both owner modes) run on
the E2B interpreter against a local-e2b server. A plan names one sandbox
effect of a workload (``Start`` #0, say) and one wire fault; while that
effect runs, the fault is armed on the server for the effect's decisive
request (the launcher's ``start`` for a Start, ``wait`` for a Wait, the
sandbox create for the first Ensure, ...), so the SDK meets it exactly as
it would meet the network, and the interpreter's failure table decides what
it means. A call that comes back ``uncertain`` is retried at once with the
same operation key, as a harness does; every world is judged by the kit's
judge against the server's ground truth (launches per task id, counted by
marks the commands send: :func:`sandrail.local_e2b.e2b_target`).

Which effects can be struck is learned first, from one fault-free run of
each workload (a wait that brought an ended command's whole output back
makes its later reads cost nothing on the wire: those reads cannot be
struck). Each plan runs in a fresh world (a fresh backend and sandboxes) on
a server shared by the plans of one worker; a plan that kills the server
gets the next plan a new one.

The wire kinds and the campaign kinds they stand for are in
:data:`WIRE_KINDS`; the campaign kinds with no wire equivalent, and why, in
:data:`NO_WIRE_EQUIVALENT`.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import multiprocessing
import random
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any, Literal

import attrs

from sandrail.core import (
    Cancel,
    Effect,
    EffectFailure,
    Ensure,
    Inspect,
    Publish,
    Read,
    SandboxReady,
    SandboxState,
    Start,
    Wait,
)
from sandrail.interpreters.simulator import FAULT_TABLE, FaultKind, SimulatedHarness
from sandrail.testing._calls import Mode
from sandrail.testing._commands import SECRET
from sandrail.testing._execute import PlanOutcome, run_and_judge
from sandrail.testing._judge import CONTRACT_LINES, Violation
from sandrail.testing._plans import Workload, workloads
from sandrail.testing._truth import Target
from sandrail.testing._world import World

from ._tallies import DECISIVE_GOAL, Tallies

__all__ = [
    "DEFAULT_WIRE_PLANS",
    "NO_WIRE_EQUIVALENT",
    "WIRE_KINDS",
    "WireKind",
    "WireMapping",
    "WirePlan",
    "WirePlanFault",
    "WireReport",
    "run_wire_campaign",
    "run_wire_plan",
    "strikable_slots",
    "wire_plans",
]

DEFAULT_WIRE_PLANS = 240
_UNDECIDED_SHOWN = 10
REQUEST_TIMEOUT_SECONDS = 2.0
"""The backend's request timeout in the wire campaign: a delay strikes past it."""
_DELAY_SECONDS = REQUEST_TIMEOUT_SECONDS + 1.0


class WireKind(enum.StrEnum):
    """A fault on the wire (or a command run as root), as local-e2b does it."""

    REFUSE = "refuse"
    STATUS_429 = "status_429"
    DROP_BEFORE_READ = "drop_before_read"
    DROP_AFTER_EFFECT = "drop_after_effect"
    CUT_STREAM = "cut_stream"
    DELAY = "delay"
    STATUS_502_NOT_FOUND = "status_502_not_found"
    KILL_SERVER = "kill_server"
    LEDGER_WIPED = "ledger_wiped"


@attrs.frozen
class WireMapping:
    """What a wire kind stands for in the campaign's fault table."""

    stands_for: FaultKind
    transient: bool
    """Whether it destroys no evidence (a retry must then be decisive)."""
    how: str


_HOW: Mapping[WireKind, str] = {
    WireKind.REFUSE: (
        "the listener of the effect's decisive request refuses connections while it runs"
    ),
    WireKind.STATUS_429: "the decisive request is answered 429, not served",
    WireKind.DROP_BEFORE_READ: (
        "the connection is reset before the request is read (the client cannot tell it "
        "from a drop after the effect: maybe sent)"
    ),
    WireKind.DROP_AFTER_EFFECT: "served, then the connection is reset before the answer",
    WireKind.CUT_STREAM: "served, the answer cut after its first stream message",
    WireKind.DELAY: (
        f"served at once, the answer held {_DELAY_SECONDS:g} s: past the client's timeout"
    ),
    WireKind.STATUS_502_NOT_FOUND: (
        "the edge answers 502 'sandbox not found', and the sandbox is killed"
    ),
    WireKind.KILL_SERVER: "the answer is cut and the whole server dies (every sandbox with it)",
    WireKind.LEDGER_WIPED: (
        "a root command deletes the task claims and their log, before or after the effect"
    ),
}
"""How each wire kind strikes (what it stands for is the fault table's)."""

WIRE_KINDS: Mapping[WireKind, WireMapping] = {
    WireKind(wire): WireMapping(kind, row.transient, _HOW[WireKind(wire)])
    for kind, row in FAULT_TABLE.items()
    for wire in row.wire
}
"""Every wire kind, the campaign kind whose row of the fault table names it
(and so whether it is transient), and how it strikes."""

if set(WIRE_KINDS) != set(WireKind):  # pragma: no cover - a wire kind no row names
    raise ImportError(f"wire kinds no fault-table row names: {set(WireKind) - set(WIRE_KINDS)}")

NO_WIRE_EQUIVALENT: Mapping[FaultKind, str] = {
    kind: row.no_wire for kind, row in FAULT_TABLE.items() if row.no_wire is not None
}
"""Campaign kinds the wire campaign cannot strike, and why (the fault
table's ``no_wire``; the simulator's campaign strikes them)."""

TRANSIENT_WIRE_KINDS: tuple[WireKind, ...] = tuple(
    kind for kind, mapping in WIRE_KINDS.items() if mapping.transient
)
_TRANSIENT = tuple(kind.value for kind in TRANSIENT_WIRE_KINDS)

# The effect's decisive request: (route, a word of its body that picks it).
_DECISIVE: Mapping[type, tuple[str, str | None]] = {
    Inspect: ("GET /v2/sandboxes", None),
    Ensure: ("POST /v2/sandboxes", None),
    Publish: ("POST /process.Process/Start", " publish "),
    Start: ("POST /process.Process/Start", " start "),
    Wait: ("POST /process.Process/Start", " wait "),
    Read: ("POST /process.Process/Start", " read "),
    Cancel: ("POST /process.Process/Start", " cancel "),
}
_SERVER_KINDS = {
    WireKind.STATUS_429: "status_429",
    WireKind.DROP_BEFORE_READ: "drop_before_read",
    WireKind.DROP_AFTER_EFFECT: "drop_after_effect",
    WireKind.CUT_STREAM: "cut_stream",
    WireKind.DELAY: "delay",
    WireKind.STATUS_502_NOT_FOUND: "status_502_not_found",
    WireKind.KILL_SERVER: "kill_server",
}
"""Wire kinds the server's fault book strikes (by its WireFaultKind value)."""


@attrs.frozen
class WirePlanFault:
    """One fault of a plan: ``kind`` on the ``occurrence``-th (from 0)
    sandbox effect named ``effect``; ``when`` says whether a wipe comes
    before or after the effect (``"on"`` for faults on its request)."""

    effect: str
    occurrence: int
    kind: WireKind
    when: Literal["on", "before", "after"] = "on"

    def __str__(self) -> str:
        when = "" if self.when == "on" else f", when={self.when!r}"
        return (
            f"WirePlanFault(effect={self.effect!r}, occurrence={self.occurrence}, "
            f"kind=WireKind.{self.kind.name}{when})"
        )


@attrs.frozen
class WirePlan:
    """A workload (by owner mode and name) and the one fault struck in it."""

    mode: Mode
    workload: str
    fault: WirePlanFault

    def __str__(self) -> str:
        return f"workload {self.mode}/{self.workload!r}: {self.fault}"


# ---------------------------------------------------------------------------
# The server


class ServerHolder:
    """One local-e2b server for a run of plans, started again when a plan
    killed it."""

    def __init__(self) -> None:
        self._stack: contextlib.ExitStack | None = None
        self._server: Any = None

    def get(self) -> Any:
        """A live server (a ``LocalE2B``)."""
        if self._server is None or not self._server.alive:
            self.close()
            from sandrail.local_e2b import serve

            self._stack = contextlib.ExitStack()
            self._server = self._stack.enter_context(serve(signal_scope="process"))
        return self._server

    def close(self) -> None:
        if self._stack is not None:
            stack, self._stack, self._server = self._stack, None, None
            stack.close()

    def __enter__(self) -> ServerHolder:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


# ---------------------------------------------------------------------------
# Striking one effect's request


class WireStrike:
    """In front of the E2B interpreter: counts sandbox effects, and while
    the plan's effect runs, arms its wire fault on the server for that
    effect's decisive request (the world's ``faults``: ``faults_fired``,
    and no held requests). Without a fault it observes which effects made
    their decisive request on the wire (:attr:`observed`)."""

    asynchronous = True

    def __init__(self, inner: Callable[[Any], Any], server: Any, target: Target) -> None:
        self.inner = inner
        self.server = server
        self.target = target
        self.fault: WirePlanFault | None = None
        self.faults_fired: list[WirePlanFault] = []
        self.held: list[Any] = []
        self.late_deliveries: list[Any] = []
        self.observed: list[tuple[str, int]] = []
        """(effect, occurrence) of each effect whose decisive request was made."""
        self._received: dict[str, int] = {}
        self._sandboxes: dict[tuple[str, str], str] = {}

    def deliver_held(self) -> list[Any]:
        return []

    async def deliver_held_async(self) -> list[Any]:
        return []

    def _addressed(self, effect: Effect) -> str | None:
        if isinstance(effect, Ensure | Inspect):
            return self._sandboxes.get((effect.session_id, effect.owner_key))
        sandbox_id = getattr(effect, "sandbox_id", None)
        return sandbox_id if isinstance(sandbox_id, str) else None

    def _decisive(self, effect: Effect) -> int:
        route, _ = _DECISIVE[type(effect)]
        return sum(1 for request in self.server.truth().requests if request.route == route)

    async def __call__(self, effect: Effect) -> Any:
        name = type(effect).__name__
        occurrence = self._received.get(name, 0)
        self._received[name] = occurrence + 1
        fault = self.fault
        if fault is None or (fault.effect, fault.occurrence) != (name, occurrence):
            made = await asyncio.to_thread(self._decisive, effect)
            outcome = await self._pass(effect)
            if await asyncio.to_thread(self._decisive, effect) > made:
                self.observed.append((name, occurrence))
            return outcome
        return await self._strike(effect, fault)

    async def _pass(self, effect: Effect) -> Any:
        outcome = self.inner(effect)
        if asyncio.iscoroutine(outcome) or isinstance(outcome, asyncio.Future):
            outcome = await outcome
        if (
            isinstance(effect, Ensure | Inspect)
            and isinstance(outcome, SandboxReady | SandboxState)
            and outcome.sandbox_id is not None
        ):
            self._sandboxes[(effect.session_id, effect.owner_key)] = outcome.sandbox_id
        return outcome

    async def _strike(self, effect: Effect, fault: WirePlanFault) -> Any:
        from sandrail.local_e2b import Route, WireFault, WireFaultKind

        server = self.server
        route, match = _DECISIVE[type(effect)]
        fired = False
        if fault.kind is WireKind.LEDGER_WIPED and fault.when == "before":
            fired = await self._wipe(effect)
        elif fault.kind is WireKind.REFUSE:
            server.refuse(Route(route).listener)
        elif fault.kind in _SERVER_KINDS:
            server.inject(
                WireFault(
                    kind=WireFaultKind(_SERVER_KINDS[fault.kind]),
                    route=Route(route),
                    match=match,
                    seconds=_DELAY_SECONDS,
                )
            )
        failed = False
        try:
            return await self._pass(effect)
        except EffectFailure:
            failed = True
            raise
        finally:
            if fault.kind is WireKind.REFUSE:
                fired = failed
            elif fault.kind is WireKind.KILL_SERVER:
                fired = not server.alive
            elif fault.kind in _SERVER_KINDS:
                fired = not server.pending_faults()
            if server.alive:
                server.clear_faults()
            if fault.kind is WireKind.STATUS_502_NOT_FOUND and fired:
                await self._kill(effect)
            if fault.kind is WireKind.LEDGER_WIPED and fault.when == "after":
                fired = await self._wipe(effect)
            if fired:
                self.faults_fired.append(fault)

    async def _wipe(self, effect: Effect) -> bool:
        sandbox_id = self._addressed(effect)
        if sandbox_id is None or self.target.wipe_ledger is None:
            return False
        await asyncio.to_thread(self.target.wipe_ledger, sandbox_id)
        return True

    async def _kill(self, effect: Effect) -> None:
        sandbox_id = self._addressed(effect)
        if sandbox_id is not None and self.target.kill_sandbox is not None:
            with contextlib.suppress(Exception):
                await asyncio.to_thread(self.target.kill_sandbox, sandbox_id)


def _world(server: Any, fault: WirePlanFault | None) -> tuple[World, WireStrike]:
    from sandrail.local_e2b import e2b_target

    target = e2b_target(server, request_timeout_seconds=REQUEST_TIMEOUT_SECONDS)
    strike = WireStrike(target.backend, server, target)
    strike.fault = fault
    world = World(
        backend=strike,
        faults=strike,
        truth=target.truth,
        harness=SimulatedHarness(),
        target=target,
        secrets=[SECRET],
    )
    return world, strike


@attrs.frozen
class WireOutcome:
    """One plan's outcome, and whether its fault really struck."""

    outcome: PlanOutcome
    fired: bool
    observed: tuple[tuple[str, int], ...] = ()


def run_wire_plan(workload: Workload, fault: WirePlanFault | None, server: Any) -> WireOutcome:
    """Run ``workload`` on the E2B interpreter against ``server`` with
    ``fault`` struck on the wire (none: a fault-free run that observes which
    effects can be struck); judge it."""
    world, strike = _world(server, fault)
    try:
        outcome = run_and_judge(world, workload)
    finally:
        world.close()
        if server.alive:
            server.clear_faults()
    return WireOutcome(
        outcome,
        fired=bool(strike.faults_fired),
        observed=tuple(strike.observed),
    )


# ---------------------------------------------------------------------------
# Plans


def _workloads(modes: Sequence[Mode]) -> tuple[Workload, ...]:
    return tuple(workload for mode in modes for workload in workloads(mode))


def strikable_slots(
    workload: Workload, server: Any
) -> tuple[tuple[tuple[str, int], ...], PlanOutcome]:
    """The (effect, occurrence) slots of ``workload`` whose decisive request
    reaches the wire in a fault-free run, and that run's outcome."""
    run = run_wire_plan(workload, None, server)
    return run.observed, run.outcome


def wire_plans(
    slots: Mapping[tuple[Mode, str], Sequence[tuple[str, int]]],
    *,
    count: int | None,
    seed: int = 0,
    kinds: Sequence[WireKind] = tuple(WireKind),
) -> list[WirePlan]:
    """Every plan over ``slots`` (workload -> strikable slots) and ``kinds``
    (a wipe before and after), or ``count`` of them drawn reproducibly from
    ``seed``, the kinds taking turns so each gets its share."""
    by_kind: dict[WireKind, list[WirePlan]] = {kind: [] for kind in kinds}
    for (mode, name), found in slots.items():
        for effect, occurrence in found:
            for kind in kinds:
                whens: tuple[Literal["on", "before", "after"], ...] = (
                    ("before", "after") if kind is WireKind.LEDGER_WIPED else ("on",)
                )
                for when in whens:
                    fault = WirePlanFault(effect, occurrence, kind, when)
                    by_kind[kind].append(WirePlan(mode, name, fault))
    rng = random.Random(f"sandrail-wire:{seed}")
    for plans in by_kind.values():
        rng.shuffle(plans)
    chosen: list[WirePlan] = []
    queues = [list(plans) for plans in by_kind.values() if plans]
    while queues and (count is None or len(chosen) < count):
        for queue in list(queues):
            if count is not None and len(chosen) >= count:
                break
            chosen.append(queue.pop())
            if not queue:
                queues.remove(queue)
    return chosen


# ---------------------------------------------------------------------------
# The report


@attrs.define
class WireReport(Tallies):
    """What the wire campaign found (see :func:`run_wire_campaign`): its
    :class:`Tallies` keyed by wire kind, plans, failures and undecided retries."""

    seed: int
    workers: int = 1
    planned: int = 0
    plans: int = 0
    """Plans whose fault struck (the others are :attr:`not_struck`)."""
    not_struck: int = 0
    fault_free: int = 0
    failures: list[tuple[Violation, str]] = attrs.Factory(list)
    undecided: list[tuple[str, str]] = attrs.Factory(list)
    """(plan, error_type) of the first :data:`_UNDECIDED_SHOWN` retries that
    stayed uncertain after a transient wire fault, to run again by hand."""
    elapsed: float = 0.0

    def decisive(self) -> tuple[int, int]:
        """(decisive retries, all retries) after transient wire faults."""
        return self.count_decisive(_TRANSIENT)

    @property
    def decisive_share(self) -> float:
        return self.decisive_share_of(_TRANSIENT)

    @property
    def passed(self) -> bool:
        return not sum(self.violations.values()) and self.decisive_share >= DECISIVE_GOAL

    def tally(self, outcome: PlanOutcome, *, plan: str, fired: bool, fault_free: bool) -> None:
        if fault_free:
            self.fault_free += 1
        elif fired:
            self.plans += 1
        else:
            self.not_struck += 1
        world = outcome.world
        self.calls += len(world.calls)
        for violation in outcome.violations:
            self.violations[violation.line] += 1
        if outcome.violations and not any(
            v.line == outcome.violations[0].line for v, _ in self.failures
        ):
            self.failures.append((outcome.violations[0], plan))
        for record in world.calls:
            if record.result is None:
                continue
            for fault in record.faults:
                self.coverage.setdefault(fault.kind.value, Counter())[record.result.status] += 1
        for retry in outcome.retries:
            self.count_retry(retry, _TRANSIENT)
            undecided = retry.status == "uncertain" and retry.kind in _TRANSIENT
            if undecided and len(self.undecided) < _UNDECIDED_SHOWN:
                self.undecided.append((plan, retry.error_type or "?"))

    def absorb(self, other: WireReport) -> None:
        self.planned += other.planned
        self.plans += other.plans
        self.not_struck += other.not_struck
        self.fault_free += other.fault_free
        self.absorb_tallies(other)
        room = _UNDECIDED_SHOWN - len(self.undecided)
        self.undecided.extend(other.undecided[: max(0, room)])
        shown = {violation.line for violation, _ in self.failures}
        for violation, plan in other.failures:
            if violation.line not in shown:
                self.failures.append((violation, plan))
                shown.add(violation.line)

    def to_json(self) -> dict[str, Any]:
        return {
            "backend": "local-e2b",
            "passed": self.passed,
            "seed": self.seed,
            "workers": self.workers,
            "planned": self.planned,
            "plans": self.plans,
            "not_struck": self.not_struck,
            "fault_free_runs": self.fault_free,
            "calls": self.calls,
            "violations": {line: self.violations.get(line, 0) for line in CONTRACT_LINES},
            "wire_kinds": {
                kind.value: {
                    "stands_for": mapping.stands_for.value,
                    "transient": mapping.transient,
                    "how": mapping.how,
                }
                for kind, mapping in WIRE_KINDS.items()
            },
            "no_wire_equivalent": {kind.value: why for kind, why in NO_WIRE_EQUIVALENT.items()},
            **self.tallies_json((kind.value for kind in WireKind), _TRANSIENT),
            "undecided_plans": [
                {"plan": plan, "error_type": error_type} for plan, error_type in self.undecided
            ],
            "failures": [
                {
                    "line": violation.line,
                    "call": violation.call,
                    "message": violation.message,
                    "plan": plan,
                }
                for violation, plan in self.failures
            ],
            "elapsed_seconds": round(self.elapsed, 3),
        }


# ---------------------------------------------------------------------------
# Running it


@attrs.frozen
class _Chunk:
    seed: int
    plans: tuple[WirePlan, ...]


def _by_name(modes: Iterable[Mode]) -> dict[tuple[Mode, str], Workload]:
    return {(w.mode, w.name): w for w in _workloads(tuple(modes))}


def _run_chunk(chunk: _Chunk) -> tuple[int, WireReport]:
    report = WireReport(seed=chunk.seed)
    chosen = _by_name(("agent", "native"))
    with ServerHolder() as holder:
        for plan in chunk.plans:
            run = run_wire_plan(chosen[(plan.mode, plan.workload)], plan.fault, holder.get())
            report.planned += 1
            report.tally(run.outcome, plan=str(plan), fired=run.fired, fault_free=False)
    return len(chunk.plans), report


def _split(plans: Sequence[WirePlan], parts: int) -> Iterator[tuple[WirePlan, ...]]:
    """Chunks of about a tenth of a worker's share, so workers stay busy."""
    size = max(1, len(plans) // (parts * 10))
    for start in range(0, len(plans), size):
        yield tuple(plans[start : start + size])


def run_wire_campaign(
    *,
    plans: int | None = DEFAULT_WIRE_PLANS,
    seed: int = 0,
    workers: int = 1,
    modes: Sequence[Mode] = ("agent", "native"),
    names: Sequence[str] | None = None,
    kinds: Sequence[WireKind] = tuple(WireKind),
    advance: Callable[[int], None] = lambda n: None,
    planned: Callable[[int], None] = lambda n: None,
) -> WireReport:
    """Learn the strikable effects of each workload (``names``: only those;
    ``modes``: owner modes) from a fault-free run on a local-e2b server
    (judged too), then run ``plans`` single-fault wire plans (``None``: all)
    in ``workers`` processes, each with its own server. ``planned(n)`` is
    told how many steps there are (the fault-free runs, then the plans; said
    again once the plans are drawn), ``advance(n)`` of each finished step."""
    if workers < 1:
        raise ValueError("workers must be at least 1")
    started = time.perf_counter()
    report = WireReport(seed=seed, workers=workers)
    chosen = [w for w in _workloads(modes) if names is None or w.name in names]
    slots: dict[tuple[Mode, str], Sequence[tuple[str, int]]] = {}
    planned(len(chosen) + (plans or 0))
    with ServerHolder() as holder:
        for workload in chosen:
            found, outcome = strikable_slots(workload, holder.get())
            slots[(workload.mode, workload.name)] = found
            report.tally(
                outcome,
                plan=f"workload {workload.mode}/{workload.name!r}: no fault",
                fired=False,
                fault_free=True,
            )
            advance(1)
    drawn = wire_plans(slots, count=plans, seed=seed, kinds=kinds)
    planned(len(chosen) + len(drawn))
    chunks = [_Chunk(seed, part) for part in _split(drawn, workers)]
    results: Iterable[tuple[int, WireReport]]
    if workers == 1 or len(chunks) < 2:
        results = map(_run_chunk, chunks)
        for done, part in results:
            report.absorb(part)
            advance(done)
    else:
        context = multiprocessing.get_context("spawn")
        with context.Pool(min(workers, len(chunks))) as pool:
            for done, part in pool.imap_unordered(_run_chunk, chunks):
                report.absorb(part)
                advance(done)
    report.elapsed = time.perf_counter() - started
    return report
