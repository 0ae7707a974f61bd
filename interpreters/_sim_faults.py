"""Fault plans: which sandbox effect fails, how, fixed before a run; and the
fault table, what each kind of fault does.

A plan is a plain frozen value, so hypothesis can draw one and a failing plan
can be pasted into a regression test as it prints.

:data:`FAULT_TABLE` holds one :class:`FaultRow` per :class:`FaultKind`: the
steps it takes (before or after the effect is applied), the failure it
raises as a value, whether it is transient, the world control it needs, the
statuses a call it strikes can reach, and the wire campaign's kinds that
stand for it. The simulator and the testing kit's ``FaultyBackend`` both
strike a fault by running its row (:func:`strike`, :func:`strike_async`),
each with its own way of doing a step; the campaign's report takes its
claims from the rows. A new kind is one member of :class:`FaultKind` and one
row here (a kind without a row fails at import).
"""

from __future__ import annotations

import enum
import random
from collections.abc import Awaitable, Callable, Iterable, Mapping
from types import MappingProxyType
from typing import Any, Final, Literal

import attrs

from sandrail.core import (
    SANDBOX_EFFECTS,
    Delivery,
    EffectFailure,
    Outcome,
    SandboxEffect,
    unexpected_failure,
)

__all__ = [
    "FAULT_TABLE",
    "SANDBOX_EFFECT_NAMES",
    "TRANSIENT_KINDS",
    "Delivered",
    "Fault",
    "FaultKind",
    "FaultPlan",
    "FaultRow",
    "Raised",
    "Step",
    "deliver_held",
    "deliver_held_async",
    "harness_step",
    "strike",
    "strike_async",
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


# ---------------------------------------------------------------------------
# The fault table

Step = Literal[
    "apply", "hold", "lose_authority", "mutate_request", "cancel", "hang", "kill", "wipe"
]
"""One step of a fault, as the backend that strikes it does it:

- ``apply``: pass the effect on (the sandbox does what it asks);
- ``hold``: keep the request to deliver it late, in order;
- ``lose_authority``: the harness stops holding its authority;
- ``mutate_request``: the harness's live request changes (drift);
- ``cancel``: the harness's cancel token fires;
- ``hang``: time passes until the request times out (none once the token
  has fired: a hang wakes on cancel);
- ``kill``: the sandbox the effect addresses dies;
- ``wipe``: a command deletes the task claims of that sandbox.
"""

STATUSES: Final = ("ok", "error", "uncertain")
"""What a struck call can come back as (``approval_required`` is decided
before any sandbox effect, so no fault reaches it)."""


@attrs.frozen
class Raised:
    """The failure a fault raises, as a value: whether the request may have
    reached the sandbox, the detail, and whether it is the harness's abort."""

    delivery: Delivery
    message: str
    aborted: bool = False

    def failure(self) -> EffectFailure:
        """The :class:`~sandrail.core.EffectFailure` to raise."""
        return EffectFailure(self.delivery, self.message, aborted=self.aborted)


ABORTED: Final = Raised(Delivery.MAYBE_SENT, "aborted", aborted=True)
"""What a fault raises once the harness's cancel token has fired, where its
row says the abort wins (``abort_wins``)."""


def _reason_for_transient(
    row: FaultRow, attribute: attrs.Attribute[Any], value: str | None
) -> None:
    if row.transient == (value is not None):
        raise ValueError(
            f"{row.kind.value}: a kind that destroys evidence (not transient) says why a "
            "retry may stay uncertain, and only such a kind does"
        )


def _reachable(row: FaultRow, attribute: attrs.Attribute[Any], value: frozenset[str]) -> None:
    if not value or not value <= set(STATUSES):
        raise ValueError(f"{row.kind.value}: reaches {sorted(value)}, not statuses of {STATUSES}")


@attrs.frozen(kw_only=True)
class FaultRow:
    """What one kind of fault does, and what follows from it."""

    kind: FaultKind
    before: tuple[Step, ...]
    """The steps when the fault strikes before the effect is applied."""
    after: tuple[Step, ...]
    """The steps when it strikes after (the same as ``before`` where the kind
    fixes the order)."""
    raises: Raised | None
    """The failure raised after the steps; ``None``: the effect's outcome is
    returned (the fault acted on the harness, not on the answer)."""
    abort_wins: bool = False
    """Whether, once the harness's cancel token has fired, :data:`ABORTED` is
    raised instead of ``raises`` (a request that waits wakes on cancel)."""
    transient: bool
    """Whether it destroys no evidence: after it, a retry with the same
    operation key can always tell what happened, so the campaign holds such
    retries to being decisive (``ok`` or ``error``)."""
    retry_may_stay_uncertain: str | None = attrs.field(
        default=None, validator=_reason_for_transient
    )
    """For a kind that is not transient: why a retry after it may stay
    ``uncertain`` (the report prints it)."""
    needs: Literal["kill_sandbox", "wipe_ledger"] | None = None
    """The world control a backend other than the simulator needs to strike
    it (a :class:`~sandrail.testing.Target`'s)."""
    reaches: frozenset[str] = attrs.field(
        default=frozenset({"error", "uncertain"}), validator=_reachable
    )
    """The statuses a call it strikes can come back as."""
    unreachable: str = "a struck sandbox effect fails or flips the harness: never ok"
    """Why the statuses it does not reach are out of reach (the report prints it)."""
    concurrent_safe: bool = True
    """Whether concurrent schedules may use it: a kind that flips the one
    harness every call shares (abort, authority, drift) is not."""
    wire: tuple[str, ...] = ()
    """The wire campaign's kinds (``sandrail simulate --backend local-e2b``)
    that stand for it on a real wire."""
    no_wire: str | None = None
    """Why no wire kind stands for it (``wire`` is empty exactly then)."""

    def __attrs_post_init__(self) -> None:
        if bool(self.wire) == (self.no_wire is not None):
            raise ValueError(f"{self.kind.value}: either wire kinds or why there are none")

    def steps(self, when: Literal["before", "after"]) -> tuple[Step, ...]:
        """The steps of a fault of this kind struck ``when``."""
        return self.after if when == "after" else self.before

    def raised(self, cancelled: bool) -> EffectFailure | None:
        """The failure to raise once the steps ran (``None``: return the
        outcome); ``cancelled``: whether the harness's token has fired."""
        if self.raises is None:
            return None
        if self.abort_wins and cancelled:
            return ABORTED.failure()
        return self.raises.failure()


_HARNESS_EVENT = "a harness event ({}), not the wire's"

_ROWS = (
    FaultRow(
        kind=FaultKind.NOT_DELIVERED,
        before=(),
        after=(),
        raises=Raised(Delivery.NOT_SENT, "connect failed"),
        transient=True,
        wire=("refuse", "status_429", "drop_before_read"),
    ),
    FaultRow(
        kind=FaultKind.RESPONSE_LOST,
        before=("apply",),
        after=("apply",),
        raises=Raised(Delivery.MAYBE_SENT, "response lost"),
        transient=True,
        wire=("drop_after_effect", "cut_stream"),
    ),
    FaultRow(
        kind=FaultKind.DELIVERED_LATE,
        before=("hold",),
        after=("hold",),
        raises=Raised(Delivery.MAYBE_SENT, "request timed out"),
        transient=True,
        no_wire=(
            "the server holds answers, not requests: a request that arrives after its "
            "caller gave up is the simulator's (and the kit's FaultyBackend's)"
        ),
    ),
    FaultRow(
        kind=FaultKind.HANG,
        before=("hang",),
        after=("apply", "hang"),
        raises=Raised(Delivery.MAYBE_SENT, "timed out waiting for the sandbox"),
        abort_wins=True,
        transient=True,
        wire=("delay",),
    ),
    FaultRow(
        kind=FaultKind.ABORT,
        before=("cancel",),
        after=("apply", "cancel"),
        raises=ABORTED,
        transient=True,
        concurrent_safe=False,
        no_wire=_HARNESS_EVENT.format("its cancel token"),
    ),
    FaultRow(
        kind=FaultKind.AUTHORITY_LOST,
        before=("lose_authority", "apply"),
        after=("apply", "lose_authority"),
        raises=None,
        transient=True,
        concurrent_safe=False,
        no_wire=_HARNESS_EVENT.format("its lease"),
    ),
    FaultRow(
        kind=FaultKind.REQUEST_MUTATED,
        before=("mutate_request", "apply"),
        after=("apply", "mutate_request"),
        raises=None,
        transient=True,
        concurrent_safe=False,
        no_wire=_HARNESS_EVENT.format("its request object"),
    ),
    FaultRow(
        kind=FaultKind.MALFORMED_RESPONSE,
        before=("apply",),
        after=("apply",),
        raises=Raised(Delivery.MAYBE_SENT, "malformed response"),
        transient=True,
        no_wire=(
            "a garbled launcher answer is no network fault (the E2B tests garble answers directly)"
        ),
    ),
    FaultRow(
        kind=FaultKind.SANDBOX_DIES,
        before=("kill",),
        after=("apply", "kill"),
        raises=Raised(Delivery.MAYBE_SENT, "sandbox not found"),
        transient=False,
        retry_may_stay_uncertain=(
            "the sandbox and everything the command did died with it: the retry cannot reach "
            "it, and what ran before is unknowable (never 'nothing ran' once its key may "
            "have started the task)"
        ),
        needs="kill_sandbox",
        wire=("status_502_not_found", "kill_server"),
    ),
    FaultRow(
        kind=FaultKind.LEDGER_WIPED,
        before=("wipe", "apply"),
        after=("apply", "wipe"),
        raises=Raised(Delivery.MAYBE_SENT, "response lost"),
        transient=False,
        retry_may_stay_uncertain=(
            "the task's claim, output and state were deleted (by the fault, or by a command "
            "in the workload): the sandbox cannot show the first launch, nor prove it never "
            "happened (claim_lost), so the retry launches nothing and says uncertain"
        ),
        needs="wipe_ledger",
        concurrent_safe=False,
        wire=("ledger_wiped",),
    ),
)

FAULT_TABLE: Final[Mapping[FaultKind, FaultRow]] = MappingProxyType(
    {row.kind: row for row in _ROWS}
)
"""Every fault kind's row, in :class:`FaultKind` order."""

if tuple(FAULT_TABLE) != tuple(FaultKind):  # pragma: no cover - a kind without its row
    raise ImportError(f"the fault table's rows are not FaultKind's members: {tuple(FAULT_TABLE)}")

TRANSIENT_KINDS: Final[tuple[FaultKind, ...]] = tuple(
    kind for kind, row in FAULT_TABLE.items() if row.transient
)
"""Fault kinds that destroy no evidence (their rows say ``transient``): after
one, a retry with the same operation key can always tell what happened."""


def harness_step(harness: Any, step: Step) -> bool:
    """Do ``step`` if it is one the harness takes (``lose_authority``,
    ``mutate_request``, ``cancel``: the same in every backend) and say
    whether it was. ``harness`` is a ``SimulatedHarness``."""
    if step == "lose_authority":
        harness.authority_held = False
    elif step == "mutate_request":
        harness.mutate_request()
    elif step == "cancel":
        harness.cancel_token.cancel()
    else:
        return False
    return True


def strike(
    fault: Fault,
    apply: Callable[[], Any],
    act: Callable[[Step], None],
    cancelled: Callable[[], bool],
) -> Any:
    """Strike ``fault`` by running its row: each step in order (``apply``
    through ``apply``, every other step through ``act``), then raise the
    row's failure, or return what ``apply`` gave."""
    row = FAULT_TABLE[fault.kind]
    outcome: Any = None
    for step in row.steps(fault.when):
        if step == "apply":
            outcome = apply()
        else:
            act(step)
    failure = row.raised(cancelled())
    if failure is not None:
        raise failure
    return outcome


async def strike_async(
    fault: Fault,
    apply: Callable[[], Awaitable[Any]],
    act: Callable[[Step], None],
    cancelled: Callable[[], bool],
) -> Any:
    """:func:`strike` with an asynchronous ``apply``."""
    row = FAULT_TABLE[fault.kind]
    outcome: Any = None
    for step in row.steps(fault.when):
        if step == "apply":
            outcome = await apply()
        else:
            act(step)
    failure = row.raised(cancelled())
    if failure is not None:
        raise failure
    return outcome


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
    simulator and the testing kit's faulty backend hold requests alike. A
    request whose late delivery raises gave the failure the port would make
    of it (:func:`~sandrail.core.unexpected_failure`): nobody waits for its
    answer, so the judge is told, not the caller."""
    results: list[Outcome | EffectFailure] = []
    while held:
        effect = held.pop(0)
        result: Outcome | EffectFailure
        try:
            result = apply(effect)
        except EffectFailure as failure:
            result = failure
        except Exception as exc:
            result = unexpected_failure(effect, exc)
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
        except Exception as exc:
            result = unexpected_failure(effect, exc)
        delivered.append((effect, result))
        results.append(result)
    return results
