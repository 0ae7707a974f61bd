"""The fault table: one row per fault kind, which the simulator and the
testing kit's ``FaultyBackend`` both run, and from which the campaign's
report takes its claims (``sandrail.interpreters.simulator.FAULT_TABLE``)."""

from __future__ import annotations

from typing import Any

import attrs
import pytest

from sandrail._campaign import UNCERTAIN_RETRY_CLASSES, UNREACHABLE
from sandrail._campaign._tallies import STATUSES
from sandrail._campaign._wire import NO_WIRE_EQUIVALENT, WIRE_KINDS, WireKind
from sandrail.core import Delivery, EffectFailure, Ensure, Inspect
from sandrail.interpreters import _sim_faults
from sandrail.interpreters.simulator import (
    FAULT_TABLE,
    TRANSIENT_KINDS,
    Fault,
    FaultKind,
    FaultPlan,
    FaultRow,
    Raised,
    Simulator,
)
from sandrail.testing import FaultyBackend, Target

ENSURE = Ensure(session_id="session-1", owner_key="agent:agent-1")
INSPECT = Inspect(session_id="session-1", owner_key="agent:agent-1")


def _runners(plan: FaultPlan) -> list[tuple[str, Any, Simulator]]:
    """The simulator striking ``plan`` itself, and a FaultyBackend striking it
    in front of a fault-free simulator: (name, backend, the world's truth)."""
    own = Simulator(plan=plan)
    inner = Simulator()
    faulty = FaultyBackend(
        inner,
        plan,
        controls=Target(
            backend=inner,
            truth=inner,
            kill_sandbox=inner.kill_sandbox,
            wipe_ledger=inner.wipe_ledger,
        ),
        late_delivery="next_effect",
    )
    return [("simulator", own, own), ("FaultyBackend", faulty, inner)]


def _raised(backend: Any, effect: Any) -> EffectFailure | None:
    try:
        backend(effect)
    except EffectFailure as failure:
        return failure
    return None


def test_every_fault_kind_has_exactly_one_row_in_kind_order() -> None:
    assert tuple(FAULT_TABLE) == tuple(FaultKind)
    assert all(row.kind is kind for kind, row in FAULT_TABLE.items())


def test_transient_is_stated_by_every_row_never_by_exclusion() -> None:
    """A row must say whether its kind is transient (no default), and a
    kind that is not says why a retry may stay uncertain."""
    fields = {field.name: field for field in attrs.fields(FaultRow)}
    assert fields["transient"].default is attrs.NOTHING
    assert tuple(kind for kind, row in FAULT_TABLE.items() if row.transient) == TRANSIENT_KINDS
    with pytest.raises(ValueError, match="says why a retry may stay uncertain"):
        attrs.evolve(FAULT_TABLE[FaultKind.SANDBOX_DIES], retry_may_stay_uncertain=None)
    with pytest.raises(ValueError, match="says why a retry may stay uncertain"):
        attrs.evolve(FAULT_TABLE[FaultKind.HANG], retry_may_stay_uncertain="lost")
    with pytest.raises(ValueError, match="either wire kinds or why there are none"):
        attrs.evolve(FAULT_TABLE[FaultKind.HANG], no_wire="none")
    with pytest.raises(ValueError, match="not statuses"):
        attrs.evolve(FAULT_TABLE[FaultKind.HANG], reaches=frozenset({"approval_required"}))


@pytest.mark.parametrize("kind", list(FaultKind), ids=lambda kind: kind.value)
@pytest.mark.parametrize("when", ["before", "after"])
def test_both_runners_raise_what_the_row_says(kind: FaultKind, when: str) -> None:
    """Struck on an Ensure, a fault raises its row's failure as a value (no
    message decides the delivery), in the simulator and the FaultyBackend
    alike, and is applied exactly when its steps say so."""
    row = FAULT_TABLE[kind]
    plan = FaultPlan((Fault(effect="Ensure", kind=kind, when=when),))  # type: ignore[arg-type]
    for name, backend, truth in _runners(plan):
        got = _raised(backend, ENSURE)
        assert got == row.raised(cancelled=kind is FaultKind.ABORT), name
        applied = "apply" in row.steps(when)  # type: ignore[arg-type]
        assert (ENSURE in truth.applied) == applied, name


def test_the_table_drives_both_runners(monkeypatch: pytest.MonkeyPatch) -> None:
    """Change a row and both runners change with it: what a kind does is
    written once, in the table, not in each runner."""
    changed = attrs.evolve(
        FAULT_TABLE[FaultKind.NOT_DELIVERED],
        before=("apply",),
        after=("apply",),
        raises=Raised(Delivery.MAYBE_SENT, "the table says so"),
    )
    monkeypatch.setattr(
        _sim_faults, "FAULT_TABLE", {**FAULT_TABLE, FaultKind.NOT_DELIVERED: changed}
    )
    plan = FaultPlan((Fault(effect="Inspect", kind=FaultKind.NOT_DELIVERED),))
    for name, backend, truth in _runners(plan):
        assert _raised(backend, INSPECT) == EffectFailure(Delivery.MAYBE_SENT, "the table says so")
        assert truth.applied == [INSPECT], name


def test_a_hang_wakes_on_cancel_as_its_row_says() -> None:
    """``abort_wins``: once the harness's token has fired, a hang raises the
    aborted failure, in both runners."""
    plan = FaultPlan((Fault(effect="Ensure", kind=FaultKind.HANG),))
    for name, backend, _ in _runners(plan):
        backend.harness.cancel_token.cancel()
        assert _raised(backend, ENSURE) == EffectFailure(
            Delivery.MAYBE_SENT, "aborted", aborted=True
        ), name


def test_the_campaign_report_takes_its_claims_from_the_table() -> None:
    for kind, row in FAULT_TABLE.items():
        for status in STATUSES:
            claim = UNREACHABLE.get((kind.value, status))
            assert claim == (None if status in row.reaches else row.unreachable)
    assert {
        kind.value: row.retry_may_stay_uncertain
        for kind, row in FAULT_TABLE.items()
        if not row.transient
    } == UNCERTAIN_RETRY_CLASSES


def test_the_wire_campaign_takes_what_each_wire_kind_stands_for_from_the_table() -> None:
    assert set(WIRE_KINDS) == set(WireKind)
    for wire, mapping in WIRE_KINDS.items():
        row = FAULT_TABLE[mapping.stands_for]
        assert wire.value in row.wire
        assert mapping.transient == row.transient
    assert dict(NO_WIRE_EQUIVALENT) == {
        kind: row.no_wire for kind, row in FAULT_TABLE.items() if not row.wire
    }


def test_a_kind_needing_a_world_control_is_refused_without_it() -> None:
    sim = Simulator()
    bare = Target(backend=sim, truth=sim)
    for kind, row in FAULT_TABLE.items():
        assert FaultyBackend.supports(bare, kind) == (row.needs is None)
