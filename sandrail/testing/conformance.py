"""The conformance kit: prove a backend keeps the contract (``docs/howto/test-your-harness.md``).

A backend author writes a :class:`~sandrail.testing.Target` factory (the
backend, its ground truth, the world controls it has) and either subclasses
:class:`BackendConformance` in a pytest module::

    class TestMyBackend(BackendConformance):
        def make_target(self, strike: Strike) -> Target:
            world = MyWorld()
            return Target(backend=MyBackend(upstream=strike(world.api)), truth=world)

which runs every conformance scenario as its own test, then a small fault
campaign; or calls :func:`check_backend` and reads the
:class:`ConformanceReport`. ``strike`` puts the kit's faults where the
backend meets its world (a ``make_target(self)`` without it gets them in
front of the whole backend instead).

The campaign strikes single faults (each fault kind, before and after the
effect, on the launches of every workload of the project's own campaign) in
front of the backend with a :class:`~sandrail.testing.FaultyBackend`, runs
each plan in a fresh world, retries every call a fault left ``uncertain``
with the same operation key, and judges each world. A backend passes when no
contract line breaks and every retry after a transient fault is decisive
(``ok`` or ``error``).
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import Any, ClassVar

import attrs

from sandrail.interpreters.simulator import FaultKind, FaultPlan, Simulator

from ._calls import Mode
from ._commands import SCRIPTS, SECRET
from ._execute import run_workload
from ._faults import TRANSIENT_KINDS, FaultyBackend
from ._judge import Violation
from ._plans import single_fault_plans, workloads
from ._scenarios import SCENARIOS, DoesNotApply, Scenario
from ._transport_probe import check_transport
from ._truth import Target, TargetFactory, takes_strike
from ._world import World

__all__ = [
    "BackendConformance",
    "ConformanceReport",
    "DoesNotApply",
    "PlanFailure",
    "check_backend",
    "run_scenario",
    "scenario_name",
    "simulator_target",
]

CAMPAIGN_EFFECTS: tuple[str, ...] = ("Ensure", "Publish", "Start", "Wait", "Cancel")
"""The effects the small campaign strikes by default."""


def simulator_target(**simulator_options: Any) -> Target:
    """A :class:`Target` on a fresh :class:`Simulator` that plays
    :data:`SCRIPTS` (with every world control)."""
    simulator_options.setdefault("scripts", SCRIPTS)
    sim = Simulator(**simulator_options)
    return Target(
        backend=sim,
        truth=sim,
        kill_sandbox=sim.kill_sandbox,
        wipe_ledger=sim.wipe_ledger,
        advance=sim.advance,
    )


@attrs.frozen
class PlanFailure:
    """A plan of the campaign the backend failed: what broke, and how to
    reproduce it (paste ``plan`` into a test: ``World.on(target, plan)``)."""

    workload: str
    plan: FaultPlan
    violations: tuple[Violation, ...]
    undecided: tuple[str, ...] = ()
    """Retries after a transient fault that stayed uncertain (their error_type)."""

    def __str__(self) -> str:
        lines = [f"{self.workload} under {self.plan}:"]
        lines += [f"  {violation}" for violation in self.violations]
        lines += [f"  a retry after the fault stayed uncertain ({why})" for why in self.undecided]
        return "\n".join(lines)


@attrs.define
class ConformanceReport:
    """What :func:`check_backend` found."""

    scenarios: dict[str, str | None] = attrs.Factory(dict)
    """Scenario name -> ``None`` (passed) or what went wrong."""
    not_applicable: dict[str, str] = attrs.Factory(dict)
    """Scenario name -> why it does not apply to the target (not run, not passed)."""
    plans: int = 0
    failures: list[PlanFailure] = attrs.Factory(list)
    skipped_kinds: tuple[FaultKind, ...] = ()
    """Fault kinds the target lacks the world controls for."""

    @property
    def passed(self) -> bool:
        """True when every scenario passed and no campaign plan failed."""
        return not self.failures and all(error is None for error in self.scenarios.values())

    def summary(self) -> str:
        """A few lines for a person: scenarios passed, plans run and failed, and
        the first failures."""
        lines = [
            f"scenarios: {sum(e is None for e in self.scenarios.values())}/{len(self.scenarios)}"
            f" passed; campaign: {self.plans} plans, {len(self.failures)} failed"
        ]
        lines += [f"scenario {name}: {error}" for name, error in self.scenarios.items() if error]
        lines += [
            f"scenario {name} does not apply: {why}" for name, why in self.not_applicable.items()
        ]
        lines += [str(failure) for failure in self.failures[:10]]
        if len(self.failures) > 10:
            lines.append(f"... and {len(self.failures) - 10} more failed plans")
        if self.skipped_kinds:
            kinds = ", ".join(kind.value for kind in self.skipped_kinds)
            lines.append(f"not struck (the target lacks the world controls): {kinds}")
        return "\n".join(lines)


def _made(make_target: TargetFactory) -> Target:
    """A target from ``make_target``, its faults (if it places them) struck
    nowhere: for looking at what the target can do."""
    if takes_strike(make_target):
        return make_target(lambda upstream: upstream)  # type: ignore[call-arg]
    return make_target()  # type: ignore[call-arg]


def run_scenario(make_target: TargetFactory, scenario: Scenario, *, owner: Mode = "agent") -> World:
    """Run one scenario in a fresh world of ``make_target``, its ports of
    ``owner`` by default, and judge it; ``AssertionError`` (a
    :class:`~sandrail.testing.ContractViolationError` for contract lines)
    says what went wrong; :class:`DoesNotApply` says the target lacks what
    the scenario needs. Returns the (closed) world, whose ``calls`` hold
    every result."""
    with World.on(make_target, scenario.plan, secrets=[SECRET]) as world:
        world.default_owner = owner
        scenario.run(world)
        world.assert_contract()
    return world


def scenario_name(scenario: Scenario, owner: Mode) -> str:
    """How reports name a scenario run: its name, with ``[native]`` for a
    native owner."""
    return scenario.name if owner == "agent" else f"{scenario.name}[{owner}]"


def campaign_plans(
    make_target: TargetFactory,
    *,
    modes: Sequence[Mode] = ("agent", "native"),
    effects: Sequence[str] = CAMPAIGN_EFFECTS,
    kinds: Sequence[FaultKind] = tuple(FaultKind),
    limit: int | None = 60,
    seed: int = 0,
) -> tuple[list[tuple[Any, FaultPlan]], tuple[FaultKind, ...]]:
    """The campaign's (workload, plan) pairs for a target: every single-fault
    plan on ``effects`` the target supports, ``limit`` of them drawn
    (reproducibly, from ``seed``) when there are more. Also returns the
    kinds skipped for want of world controls."""
    probe = _made(make_target)
    try:
        usable = [kind for kind in kinds if FaultyBackend.supports(probe, kind)]
    finally:
        probe.close()
    skipped = tuple(kind for kind in kinds if kind not in usable)
    found: list[tuple[Any, FaultPlan]] = []
    for mode in modes:
        for workload in workloads(mode):
            dry = run_workload(workload, FaultPlan(), target=make_target)
            counts: dict[str, int] = {}
            for record in dry.world.calls:
                for effect, _ in record.effects:
                    name = type(effect).__name__
                    counts[name] = counts.get(name, 0) + 1
            slots = {name: count for name, count in counts.items() if name in effects}
            for plan in single_fault_plans(slots):
                if plan.faults[0].kind in usable:
                    found.append((workload, plan))
    if limit is not None and len(found) > limit:
        random.Random(seed).shuffle(found)
        found = found[:limit]
    return found, skipped


def check_backend(
    make_target: TargetFactory,
    *,
    scenarios: bool = True,
    campaign: bool = True,
    plans: int | None = 60,
    modes: Sequence[Mode] = ("agent", "native"),
    effects: Sequence[str] = CAMPAIGN_EFFECTS,
    require_decisive: bool = True,
) -> ConformanceReport:
    """Run the conformance scenarios (once per owner mode in ``modes``) and
    a small campaign (``plans`` single-fault plans; ``None``: all of them)
    against fresh worlds of ``make_target``. Never raises for a failing
    backend: the report says what failed."""
    report = ConformanceReport()
    if scenarios:
        for mode in modes:
            for scenario in SCENARIOS:
                name = scenario_name(scenario, mode)
                try:
                    run_scenario(make_target, scenario, owner=mode)
                except DoesNotApply as exc:
                    report.not_applicable[name] = str(exc)
                except AssertionError as exc:
                    report.scenarios[name] = str(exc) or "assertion failed"
                else:
                    report.scenarios[name] = None
    if campaign:
        chosen, report.skipped_kinds = campaign_plans(
            make_target, modes=modes, effects=effects, limit=plans
        )
        transient = {kind.value for kind in TRANSIENT_KINDS}
        for workload, plan in chosen:
            outcome = run_workload(workload, plan, target=make_target)
            report.plans += 1
            undecided = tuple(
                retry.error_type or "?"
                for retry in outcome.retries
                if require_decisive and retry.kind in transient and retry.status == "uncertain"
            )
            if outcome.violations or undecided:
                report.failures.append(
                    PlanFailure(
                        f"{workload.mode}/{workload.name}", plan, outcome.violations, undecided
                    )
                )
    return report


class BackendConformance:
    """A pytest base class: subclass it as ``Test...`` and implement
    :meth:`make_target`; pytest then runs each conformance scenario as a test
    (``test_echo``, ``test_c2_...``, ...) and ``test_fault_campaign``.

    Class attributes tune it: ``scenario_modes`` (each scenario runs once
    per owner mode), ``campaign_plans`` (how many single-fault plans;
    ``None``: all), ``campaign_modes`` (owner modes), ``campaign_effects``
    (effects struck), ``require_decisive`` (a retry after a transient fault
    must say ``ok`` or ``error``).
    """

    scenario_modes: ClassVar[tuple[Mode, ...]] = ("agent", "native")
    campaign_plans: ClassVar[int | None] = 60
    campaign_modes: ClassVar[tuple[Mode, ...]] = ("agent", "native")
    campaign_effects: ClassVar[tuple[str, ...]] = CAMPAIGN_EFFECTS
    require_decisive: ClassVar[bool] = True

    def make_target(self, *args: Any, **kwargs: Any) -> Target:
        """A fresh world: the backend under test and its ground truth.
        Override it as ``make_target(self, strike: Strike) -> Target`` and
        wrap the interpreter the backend calls upstream with ``strike``, or
        as ``make_target(self) -> Target``: the faults then strike in front
        of the backend. Either override type-checks (``mypy --strict``)."""
        raise NotImplementedError("implement make_target() to return a sandrail.testing.Target")

    def test_fault_campaign(self) -> None:
        """Single faults struck in front of the backend: no contract line
        breaks, and retries after transient faults are decisive."""
        report = check_backend(
            self.make_target,
            scenarios=False,
            plans=self.campaign_plans,
            modes=self.campaign_modes,
            effects=self.campaign_effects,
            require_decisive=self.require_decisive,
        )
        assert report.passed, report.summary()

    def test_transport_failure_table(self) -> None:
        """The launcher transport ``make_target`` strikes answers real
        failures right: the launcher's refusal and a missing launcher
        ``not_sent``, a line that ran or timed out ``maybe_sent``
        (:func:`~sandrail.testing.check_transport`; the campaign's faults are
        struck above the transport's ``classify`` and never test it).
        Skipped for a target that strikes no launcher transport."""
        problems = check_transport(self.make_target)
        if problems is None:
            import pytest

            pytest.skip("make_target strikes no launcher Transport")
        assert not problems, "the transport's failure table:\n" + "\n".join(problems)

    def check_scenario(self, scenario: Scenario, owner: Mode, world: World) -> None:
        """Called after each scenario passed, with its (closed) world, whose
        ``calls`` hold every request and result: override it to hold the
        results to more (sandrail's own tests compare them with the
        simulator's, field by field). Does nothing by default."""

    def _scenario(self, name: str) -> None:
        for mode in self.scenario_modes:
            try:
                world = run_scenario(self.make_target, _BY_NAME[name], owner=mode)
            except DoesNotApply as exc:
                import pytest

                pytest.skip(f"{name} does not apply: {exc}")
            self.check_scenario(_BY_NAME[name], mode, world)

    def test_echo(self) -> None:
        """``echo hi`` exits 0 with ``hi`` on stdout, nothing on stderr, not deduplicated."""
        self._scenario("echo")

    def test_exit_codes(self) -> None:
        """``exit 3``, ``false`` and ``true`` end ``exited`` with exit codes 3, 1 and 0."""
        self._scenario("exit_codes")

    def test_seq_and_unicode(self) -> None:
        """Output comes back whole and in order, non-ASCII text included."""
        self._scenario("seq_and_unicode")

    def test_c2_retry_returns_the_first_launch(self) -> None:
        """C2: a retry with the same key launches nothing and returns the
        first launch (``deduplicated``, same task id and output)."""
        self._scenario("c2_retry_returns_the_first_launch")

    def test_c2_lost_start_answer_then_retry_launches_once(self) -> None:
        """C2: a start whose answer was lost is ``uncertain``; the retry with the
        same key returns its output, and the command launched once."""
        self._scenario("c2_lost_start_answer_then_retry_launches_once")

    def test_c2_no_fresh_sandbox_after_the_old_one_died(self) -> None:
        """C2: once the session's sandbox is killed, the backend makes no fresh
        one for it: a repeat of a launched key is ``uncertain`` and launches
        nothing, a new key is refused (``e2b_sandbox_unavailable``, executed
        false). Skipped for a target without ``kill_sandbox``."""
        self._scenario("c2_no_fresh_sandbox_after_the_old_one_died")

    def test_c3_same_key_other_arguments_conflicts(self) -> None:
        """C3: the same key with other arguments is refused
        (``e2b_command_operation_conflict``), nothing launched."""
        self._scenario("c3_same_key_other_arguments_conflicts")

    def test_c4_read_of_a_task_not_owned_is_refused(self) -> None:
        """C4: reading a task this session does not own is refused
        (``e2b_command_not_owned``)."""
        self._scenario("c4_read_of_a_task_not_owned_is_refused")

    def test_c10_stale_fence_is_refused(self) -> None:
        """C10: a native call with a fence lower than one already seen is
        refused (``e2b_command_fence_stale``)."""
        self._scenario("c10_stale_fence_is_refused")

    def test_foreground_timeout_is_timed_out_124(self) -> None:
        """A foreground command past its timeout ends ``timed_out`` with exit
        code 124."""
        self._scenario("foreground_timeout_is_timed_out_124")

    def test_background_then_read_with_wait(self) -> None:
        """A background start answers ``running`` with its reference; a read
        that waits returns the ended command's output."""
        self._scenario("background_then_read_with_wait")

    def test_c16_snippet_runs_from_a_file(self) -> None:
        """C16: a snippet runs from a file and its output comes back."""
        self._scenario("c16_snippet_runs_from_a_file")

    def test_c17_env_values_never_shown(self) -> None:
        """C17: an env value the command prints shows as ``<redacted>``."""
        self._scenario("c17_env_values_never_shown")

    def test_c18_stop_ends_the_process_group(self) -> None:
        """C18: a stop ends the command (``canceled``, exit code 143) and every
        process of its group."""
        self._scenario("c18_stop_ends_the_process_group")


_BY_NAME = {scenario.name: scenario for scenario in SCENARIOS}
