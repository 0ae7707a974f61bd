"""Hypothesis strategies shared by the test modules."""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st

MAX_SAFE = 2**53 - 1

# Text without lone surrogates: what JSON text can carry.
json_text = st.text(st.characters(exclude_categories=("Cs",)), max_size=40)
escape_heavy_text = st.text(
    st.sampled_from(['"', "\\", "\n", "\t", "\x00", "\x1f", "\x7f", "é", "€", "😀", "a", "\u2028"]),
    max_size=40,
)
json_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-MAX_SAFE, max_value=MAX_SAFE),
    st.floats(allow_nan=False, allow_infinity=False),
    json_text,
    escape_heavy_text,
)


def json_values(max_leaves: int = 30) -> st.SearchStrategy[Any]:
    """Arbitrary JSON values as Python data (dict keys may hold any character)."""
    return st.recursive(
        json_scalars,
        lambda children: st.one_of(
            st.lists(children, max_size=5),
            st.dictionaries(st.one_of(json_text, escape_heavy_text), children, max_size=5),
        ),
        max_leaves=max_leaves,
    )


identifiers = st.text(
    st.characters(min_codepoint=0x21, max_codepoint=0x7E), min_size=1, max_size=24
)


# ---------------------------------------------------------------------------
# Fault plans for the simulator


def fault_plans(max_faults: int = 4, max_occurrence: int = 6) -> st.SearchStrategy[Any]:
    """Fault plans with at most one fault per (effect, occurrence) slot."""
    from sandrail.interpreters._sim_faults import SANDBOX_EFFECT_NAMES
    from sandrail.interpreters.simulator import Fault, FaultKind, FaultPlan

    faults = st.builds(
        Fault,
        effect=st.sampled_from(SANDBOX_EFFECT_NAMES),
        occurrence=st.integers(0, max_occurrence),
        kind=st.sampled_from(list(FaultKind)),
        when=st.sampled_from(["before", "after"]),
    )
    return st.lists(faults, max_size=max_faults, unique_by=lambda f: (f.effect, f.occurrence)).map(
        lambda fs: FaultPlan(tuple(fs))
    )
