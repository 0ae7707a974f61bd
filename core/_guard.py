"""The guard decision (C9, C11) as a table.

Strategy: before and after every external step, the program asks the harness
what it sees (:class:`Observation`). Whether that observation means "go on",
"stop, nothing happened" or "stop, something may have happened" depends only
on whether a side-effect request may already have left (:class:`Phase`). The
table below is that whole decision; a missing entry is a bug, which the
exhaustive test catches.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from types import MappingProxyType
from typing import Final

import attrs

from ._results import ErrorCode

__all__ = [
    "GUARD_TABLE",
    "Continue",
    "Observation",
    "Phase",
    "Refuse",
    "Unsure",
    "Verdict",
    "decide",
    "observe",
]


class Phase(enum.Enum):
    """Has a side-effect request possibly reached the sandbox yet?"""

    BEFORE_DISPATCH = "before_dispatch"
    AFTER_DISPATCH = "after_dispatch"


class Observation(enum.Enum):
    """What a guard check saw, the most serious first (abort, drift, authority)."""

    ABORTED = "aborted"
    DRIFTED = "drifted"
    AUTHORITY_LOST = "authority_lost"
    ALL_WELL = "all_well"


@attrs.frozen
class Continue:
    """Go on to the next step."""


@attrs.frozen
class Refuse:
    """Stop with ``error``, ``executed: false``: nothing was dispatched."""

    code: ErrorCode


@attrs.frozen
class Unsure:
    """Stop with ``uncertain`` and the full locator: something may have run."""

    reason: ErrorCode


Verdict = Continue | Refuse | Unsure

GUARD_TABLE: Final[Mapping[tuple[Phase, Observation], Verdict]] = MappingProxyType(
    {
        (Phase.BEFORE_DISPATCH, Observation.ABORTED): Refuse(ErrorCode.CANCELED),
        (Phase.BEFORE_DISPATCH, Observation.DRIFTED): Refuse(ErrorCode.REQUEST_DRIFTED),
        (Phase.BEFORE_DISPATCH, Observation.AUTHORITY_LOST): Refuse(ErrorCode.AUTHORITY_UNPROVEN),
        (Phase.BEFORE_DISPATCH, Observation.ALL_WELL): Continue(),
        (Phase.AFTER_DISPATCH, Observation.ABORTED): Unsure(ErrorCode.ABORTED),
        (Phase.AFTER_DISPATCH, Observation.DRIFTED): Unsure(ErrorCode.REQUEST_DRIFTED),
        (Phase.AFTER_DISPATCH, Observation.AUTHORITY_LOST): Unsure(ErrorCode.AUTHORITY_LOST),
        (Phase.AFTER_DISPATCH, Observation.ALL_WELL): Continue(),
    }
)


def observe(*, aborted: bool, drifted: bool, authority_held: bool) -> Observation:
    """Collapse one guard check into its most serious observation."""
    if aborted:
        return Observation.ABORTED
    if drifted:
        return Observation.DRIFTED
    if not authority_held:
        return Observation.AUTHORITY_LOST
    return Observation.ALL_WELL


def decide(phase: Phase, observation: Observation) -> Verdict:
    """Look the verdict up in :data:`GUARD_TABLE`."""
    return GUARD_TABLE[(phase, observation)]
