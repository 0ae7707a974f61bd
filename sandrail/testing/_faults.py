"""Fault plans for any backend: the simulator's fault table, in front of an
interpreter the kit knows nothing about.

:class:`FaultyBackend` wraps a backend (sync or async) and strikes the
effects a :class:`~sandrail.interpreters.simulator.FaultPlan` names by
running the same rows of :data:`~sandrail.interpreters.simulator.FAULT_TABLE`
as the simulator (only how a step is done differs):
the request not delivered, delivered with its answer lost or garbled,
delivered late, hanging, the harness aborting, losing its authority or
changing its request, the sandbox dying or its ledger being wiped. The last
two need world controls (:class:`~sandrail.testing.Target`'s
``kill_sandbox`` and ``wipe_ledger``); a plan that uses them on a target
without them is refused up front (:meth:`FaultyBackend.supports`).

Differences from the simulator's own faults, because a real world has no
virtual clock: a hang takes no time (the failure is raised at once, or the
target's ``advance`` is asked to let ``hang_seconds`` pass), and held
requests are delivered by :meth:`FaultyBackend.deliver_held` (or at the next
effect, with ``late_delivery="next_effect"``).
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Callable
from typing import Any, Literal

from sandrail.core import (
    Effect,
    EffectFailure,
    Ensure,
    Inspect,
    Outcome,
    SandboxEffect,
    SandboxReady,
    SandboxState,
)
from sandrail.interpreters._drivers import is_asynchronous
from sandrail.interpreters._sim_faults import (
    deliver_held,
    deliver_held_async,
    harness_step,
    strike,
    strike_async,
)
from sandrail.interpreters.simulator import (
    FAULT_TABLE,
    TRANSIENT_KINDS,
    Fault,
    FaultKind,
    FaultPlan,
    SimulatedHarness,
    Step,
)

from ._truth import Target

__all__ = ["TRANSIENT_KINDS", "FaultyBackend"]

LateDelivery = Literal["next_effect", "manual"]


class FaultyBackend:
    """``inner`` with ``plan``'s faults struck on the way.

    ``inner`` is the interpreter the faults stand in front of: a target's
    whole backend, or (see :data:`~sandrail.testing.Strike`) the upstream a
    backend calls. ``controls`` is the target whose world controls (kill a
    sandbox, wipe its ledger, let time pass) the faults that need them use;
    a plan that needs a control the target lacks is refused (``ValueError``).

    Counts each effect type as it arrives (the ``occurrence`` of a
    :class:`Fault`), keeps what fired in :attr:`faults_fired`, requests held
    for late delivery in :attr:`held`, and what they gave once delivered in
    :attr:`late_deliveries` (the attributes the simulator has too, so the
    kit's :class:`~sandrail.testing.World` treats both alike).
    """

    def __init__(
        self,
        inner: Callable[[Any], Any],
        plan: FaultPlan | None = None,
        *,
        controls: Target | None = None,
        harness: SimulatedHarness | None = None,
        late_delivery: LateDelivery = "manual",
        hang_seconds: float = 30.0,
    ) -> None:
        self.inner = inner
        self.controls: Target | None = None
        self.plan = FaultPlan() if plan is None else plan
        self.harness = SimulatedHarness() if harness is None else harness
        self.late_delivery: LateDelivery = late_delivery
        self.hang_seconds = hang_seconds
        self.faults_fired: list[Fault] = []
        self.held: list[SandboxEffect] = []
        self.late_deliveries: list[tuple[SandboxEffect, Outcome | EffectFailure]] = []
        self.applied: list[SandboxEffect] = []
        """Every effect passed on to ``inner``, in order (answered or not)."""
        self._received: dict[str, int] = {}
        self._sandboxes: dict[tuple[str, str], str] = {}
        if controls is not None:
            self.use_controls(controls)

    def use_controls(self, controls: Target) -> None:
        """Strike the faults that need world controls with ``controls``'s;
        ``ValueError`` if the plan needs one it lacks."""
        missing = [fault for fault in self.plan.faults if not self.supports(controls, fault.kind)]
        if missing:
            raise ValueError(
                f"{missing[0].kind.value} faults need the target's "
                f"{FAULT_TABLE[missing[0].kind].needs}(sandbox_id) control"
            )
        self.controls = controls

    @staticmethod
    def supports(target: Target, kind: FaultKind) -> bool:
        """Whether ``kind`` can strike on ``target`` (some need world controls)."""
        needed = FAULT_TABLE[kind].needs
        return needed is None or getattr(target, needed) is not None

    @property
    def asynchronous(self) -> bool:
        """Whether the backend in front of which faults strike is (see
        :func:`~sandrail.interpreters._drivers.is_asynchronous`)."""
        return is_asynchronous(self.inner)

    # -- held requests -----------------------------------------------------------

    def deliver_held(self) -> list[Outcome | EffectFailure]:
        """Apply every held request now, in order; return what each gave.

        With an asynchronous backend this runs them on a private event loop:
        call :meth:`deliver_held_async` from inside a running one.
        """
        if self.asynchronous:
            return asyncio.run(self.deliver_held_async())
        return deliver_held(self.held, self._inner_sync, self.late_deliveries)

    async def deliver_held_async(self) -> list[Outcome | EffectFailure]:
        """:meth:`deliver_held` for an asynchronous backend."""
        return await deliver_held_async(self.held, self._inner_async, self.late_deliveries)

    # -- the interpreter -----------------------------------------------------------

    def __call__(self, effect: Effect) -> Any:
        if self.asynchronous:
            return self._call_async(effect)
        if self.late_delivery == "next_effect":
            self.deliver_held()
        fault = self._fault_for(effect)
        if fault is None:
            return self._inner_sync(effect)
        return strike(fault, lambda: self._inner_sync(effect), self._act(effect), self._cancelled)

    async def _call_async(self, effect: Effect) -> Any:
        if self.late_delivery == "next_effect":
            await self.deliver_held_async()
        fault = self._fault_for(effect)
        if fault is None:
            return await self._inner_async(effect)
        return await strike_async(
            fault, lambda: self._inner_async(effect), self._act(effect), self._cancelled
        )

    def _cancelled(self) -> bool:
        return self.harness.cancel_token.cancelled

    def _act(self, effect: Effect) -> Callable[[Step], None]:
        """How this backend does a fault's steps other than ``apply``."""

        def act(step: Step) -> None:
            if harness_step(self.harness, step):
                return
            if step == "hold":
                self.held.append(effect)  # type: ignore[arg-type]
            elif step == "hang":
                if not self.harness.cancel_token.cancelled:
                    self.hang()
            elif step == "kill":
                self.kill(effect)
            else:
                self.wipe(effect)

        return act

    def _effect_name(self, effect: Any) -> str:
        """The name a fault plan knows ``effect`` by (its type's)."""
        return type(effect).__name__

    def _fault_for(self, effect: Any) -> Fault | None:
        name = self._effect_name(effect)
        occurrence = self._received.get(name, 0)
        self._received[name] = occurrence + 1
        fault = self.plan.lookup(name, occurrence)
        if fault is not None:
            self.faults_fired.append(fault)
        return fault

    def _learn(self, effect: Effect, outcome: object) -> object:
        """Remember which sandbox a session's Ensure/Inspect named (a later
        fault on those effects addresses that sandbox)."""
        if isinstance(effect, Ensure | Inspect):
            sandbox_id = getattr(outcome, "sandbox_id", None)
            if isinstance(outcome, SandboxReady | SandboxState) and isinstance(sandbox_id, str):
                self._sandboxes[(effect.session_id, effect.owner_key)] = sandbox_id
        return outcome

    def _inner_sync(self, effect: Effect) -> Any:
        self.applied.append(effect)  # type: ignore[arg-type]
        return self._learn(effect, self.inner(effect))

    async def _inner_async(self, effect: Effect) -> Any:
        self.applied.append(effect)  # type: ignore[arg-type]
        outcome = self.inner(effect)
        if inspect.isawaitable(outcome):
            outcome = await outcome
        return self._learn(effect, outcome)

    # -- the world controls a fault uses ---------------------------------------------

    def addressed(self, effect: Effect) -> str | None:
        """The sandbox ``effect`` addresses (for Inspect/Ensure: the one this
        session's last answer named), if known."""
        if isinstance(effect, Ensure | Inspect):
            return self._sandboxes.get((effect.session_id, effect.owner_key))
        sandbox_id = getattr(effect, "sandbox_id", None)
        return sandbox_id if isinstance(sandbox_id, str) else None

    def hang(self) -> None:
        """Let time pass for a ``HANG`` fault, through the world's ``advance``
        control (nothing when the world has none)."""
        controls = self.controls
        if controls is not None and controls.advance is not None:
            controls.advance(self.hang_seconds)

    def kill(self, effect: Effect) -> None:
        """Kill the sandbox ``effect`` addresses, through the world's
        ``kill_sandbox`` control (nothing when it has none)."""
        sandbox_id = self.addressed(effect)
        controls = self.controls
        if sandbox_id is not None and controls is not None and controls.kill_sandbox is not None:
            controls.kill_sandbox(sandbox_id)

    def wipe(self, effect: Effect) -> None:
        """Wipe the ledger of the sandbox ``effect`` addresses, through the
        world's ``wipe_ledger`` control (nothing when it has none)."""
        sandbox_id = self.addressed(effect)
        controls = self.controls
        if sandbox_id is not None and controls is not None and controls.wipe_ledger is not None:
            controls.wipe_ledger(sandbox_id)
