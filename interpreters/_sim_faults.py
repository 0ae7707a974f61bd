"""Fault plans: which sandbox effect fails, how, fixed before a run (DESIGN §6).

A plan is a plain frozen value, so hypothesis can draw one and a failing plan
can be pasted into a regression test as it prints. What each kind does is
described in :mod:`sandrail.interpreters.simulator`.
"""

from __future__ import annotations

import enum
import random
from collections.abc import Awaitable, Callable, Iterable
from typing import Any, Literal

import attrs

from sandrail.core import SANDBOX_EFFECTS, EffectFailure, Outcome, SandboxEffect

__all__ = [
    "SANDBOX_EFFECT_NAMES",
    "Delivered",
    "Fault",
    "FaultKind",
    "FaultPlan",
    "deliver_held",
    "deliver_held_async",
]

SANDBOX_EFFECT_NAMES: tuple[str, ...] = tuple(cls.__name__ for cls in SANDBOX_EFFECTS)
"""The effect names a :class:`Fault` may target."""


class FaultKind(enum.Enum):
    """What goes wrong with one sandbox effect."""

    NOT_DELIVERED = "not_delivered"
    RESPONSE_LOST = "response_lost"
    DELIVERED_LATE = "delivered_late"
    HANG = "hang"
    ABORT = "abort"
    AUTHORITY_LOST = "authority_lost"
    REQUEST_MUTATED = "request_mutated"
    MALFORMED_RESPONSE = "malformed_response"
    SANDBOX_DIES = "sandbox_dies"
    LEDGER_WIPED = "ledger_wiped"


@attrs.frozen(kw_only=True)
class Fault:
    """``kind`` strikes the ``occurrence``-th (0-based) effect named ``effect``
    the simulator receives in its life; ``when`` says whether it strikes
    before or after the effect is applied (for the kinds where that matters).
    """

    effect: str = attrs.field(validator=attrs.validators.in_(SANDBOX_EFFECT_NAMES))
    occurrence: int = attrs.field(default=0, validator=attrs.validators.ge(0))
    kind: FaultKind
    when: Literal["before", "after"] = attrs.field(
        default="before", validator=attrs.validators.in_(("before", "after"))
    )


def _faults(faults: Iterable[Fault]) -> tuple[Fault, ...]:
    return tuple(faults)


@attrs.frozen
class FaultPlan:
    """The faults of one run; at most one per (effect, occurrence).

    ``FaultPlan()`` is the plan without faults.
    """

    faults: tuple[Fault, ...] = attrs.field(default=(), converter=_faults)
    _slots: dict[tuple[str, int], Fault] = attrs.field(
        init=False, factory=dict, eq=False, repr=False, hash=False
    )

    def __attrs_post_init__(self) -> None:
        for fault in self.faults:
            slot = (fault.effect, fault.occurrence)
            if slot in self._slots:
                raise ValueError(f"two faults strike {fault.effect} occurrence {fault.occurrence}")
            self._slots[slot] = fault

    def lookup(self, effect: str, occurrence: int) -> Fault | None:
        """The fault striking that occurrence of that effect, if any."""
        return self._slots.get((effect, occurrence)) if self._slots else None

    @classmethod
    def random(cls, seed: int, *, max_faults: int = 3, max_occurrence: int = 3) -> FaultPlan:
        """A plan drawn from ``random.Random(seed)``: the same seed gives the same
        plan. Up to ``max_faults`` faults, each on an occurrence in
        ``0..max_occurrence``; a slot drawn twice keeps its first fault.
        """
        rng = random.Random(seed)
        faults: dict[tuple[str, int], Fault] = {}
        for _ in range(rng.randint(0, max_faults)):
            fault = Fault(
                effect=rng.choice(SANDBOX_EFFECT_NAMES),
                occurrence=rng.randint(0, max_occurrence),
                kind=rng.choice(list(FaultKind)),
                when=rng.choice(("before", "after")),
            )
            faults.setdefault((fault.effect, fault.occurrence), fault)
        return cls(tuple(faults.values()))


Delivered = list[tuple[SandboxEffect, Outcome | EffectFailure]]
"""Held requests as they arrived late, each with what it gave."""


def deliver_held(
    held: list[SandboxEffect], apply: Callable[[SandboxEffect], Any], delivered: Delivered
) -> list[Outcome | EffectFailure]:
    """Apply every ``held`` request now, in order (emptying ``held``), noting
    each in ``delivered`` with what it gave; return what each gave. The
    simulator and the testing kit's faulty backend hold requests alike."""
    results: list[Outcome | EffectFailure] = []
    while held:
        effect = held.pop(0)
        result: Outcome | EffectFailure
        try:
            result = apply(effect)
        except EffectFailure as failure:
            result = failure
        delivered.append((effect, result))
        results.append(result)
    return results


async def deliver_held_async(
    held: list[SandboxEffect],
    apply: Callable[[SandboxEffect], Awaitable[Any]],
    delivered: Delivered,
) -> list[Outcome | EffectFailure]:
    """:func:`deliver_held` for an asynchronous ``apply``."""
    results: list[Outcome | EffectFailure] = []
    while held:
        effect = held.pop(0)
        result: Outcome | EffectFailure
        try:
            result = await apply(effect)
        except EffectFailure as failure:
            result = failure
        delivered.append((effect, result))
        results.append(result)
    return results
