"""The guard decision table (C9, C11), checked exhaustively."""

from __future__ import annotations

import itertools

import pytest

from sandrail.core import (
    GUARD_TABLE,
    Continue,
    ErrorCode,
    Observation,
    Phase,
    Refuse,
    Unsure,
    decide,
    observe,
)

EXPECTED = {
    (Phase.BEFORE_DISPATCH, Observation.ABORTED): Refuse(ErrorCode.CANCELED),
    (Phase.BEFORE_DISPATCH, Observation.DRIFTED): Refuse(ErrorCode.REQUEST_DRIFTED),
    (Phase.BEFORE_DISPATCH, Observation.AUTHORITY_LOST): Refuse(ErrorCode.AUTHORITY_UNPROVEN),
    (Phase.BEFORE_DISPATCH, Observation.ALL_WELL): Continue(),
    (Phase.AFTER_DISPATCH, Observation.ABORTED): Unsure(ErrorCode.ABORTED),
    (Phase.AFTER_DISPATCH, Observation.DRIFTED): Unsure(ErrorCode.REQUEST_DRIFTED),
    (Phase.AFTER_DISPATCH, Observation.AUTHORITY_LOST): Unsure(ErrorCode.AUTHORITY_LOST),
    (Phase.AFTER_DISPATCH, Observation.ALL_WELL): Continue(),
}


@pytest.mark.parametrize(("phase", "observation"), list(itertools.product(Phase, Observation)))
def test_c9_c11_guard_table_covers_every_cell(phase: Phase, observation: Observation) -> None:
    assert decide(phase, observation) == EXPECTED[(phase, observation)]


def test_c9_guard_table_has_no_extra_cells() -> None:
    assert set(GUARD_TABLE) == set(EXPECTED)


def test_c5_c6_before_dispatch_never_unsure_after_dispatch_never_refuses() -> None:
    for (phase, _), verdict in GUARD_TABLE.items():
        if phase is Phase.BEFORE_DISPATCH:
            assert not isinstance(verdict, Unsure)
        else:
            assert not isinstance(verdict, Refuse)


@pytest.mark.parametrize(
    ("aborted", "drifted", "held"), list(itertools.product([False, True], repeat=3))
)
def test_c11_abort_outranks_drift_which_outranks_authority(
    aborted: bool, drifted: bool, held: bool
) -> None:
    observed = observe(aborted=aborted, drifted=drifted, authority_held=held)
    if aborted:
        assert observed is Observation.ABORTED
    elif drifted:
        assert observed is Observation.DRIFTED
    elif not held:
        assert observed is Observation.AUTHORITY_LOST
    else:
        assert observed is Observation.ALL_WELL


def test_c9_guard_table_is_read_only() -> None:
    with pytest.raises(TypeError):
        GUARD_TABLE[(Phase.BEFORE_DISPATCH, Observation.ALL_WELL)] = Unsure(  # type: ignore[index]
            ErrorCode.ABORTED
        )
