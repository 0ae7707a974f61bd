"""Strategies for faults, fault plans and multi-fault schedules."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from hypothesis import strategies as st

from sandrail.interpreters.simulator import SANDBOX_EFFECT_NAMES, Fault, FaultKind, FaultPlan

from ._plans import schedule_from

__all__ = ["fault_plans", "faults", "schedules"]


def faults(
    *,
    effects: Sequence[str] = SANDBOX_EFFECT_NAMES,
    kinds: Sequence[FaultKind] = tuple(FaultKind),
    max_occurrence: int = 6,
) -> st.SearchStrategy[Fault]:
    """One fault: which effect, which occurrence of it, what kind, before or after."""
    return st.builds(
        Fault,
        effect=st.sampled_from(list(effects)),
        occurrence=st.integers(0, max_occurrence),
        kind=st.sampled_from(list(kinds)),
        when=st.sampled_from(["before", "after"]),
    )


def fault_plans(
    max_faults: int = 4,
    max_occurrence: int = 6,
    *,
    effects: Sequence[str] = SANDBOX_EFFECT_NAMES,
    kinds: Sequence[FaultKind] = tuple(FaultKind),
) -> st.SearchStrategy[FaultPlan]:
    """Fault plans with at most one fault per (effect, occurrence) slot
    (``max_faults=1``: single-fault plans; more: multi-fault plans)."""
    drawn = faults(effects=effects, kinds=kinds, max_occurrence=max_occurrence)
    return st.lists(drawn, max_size=max_faults, unique_by=lambda f: (f.effect, f.occurrence)).map(
        lambda fs: FaultPlan(tuple(fs))
    )


def schedules(*, index: int = 0) -> st.SearchStrategy[Any]:
    """Multi-fault schedules as the campaign draws them (a workload of calls,
    harness restarts, concurrent duplicates, late deliveries and fence
    changes, with bursts of faults), each drawn from a random source
    hypothesis controls, so a failing schedule shrinks. Run one with
    :func:`sandrail.testing.run_schedule`."""
    return st.builds(lambda rng: schedule_from(rng, seed=index), st.randoms(use_true_random=False))
